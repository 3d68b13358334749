"""What a chapter declares about its runs, and its checks: the parameter profiles ``params/<chapter>/<profile>.yaml``
and the notebook's ``parameters`` cell. Planning runs (:mod:`agentpost.run.params`) and ``agentpost validate`` apply
the same rules, from here.

A profile is a YAML mapping with ``seeds``, ``parameters`` (a mapping), an optional ``description`` and
``timeout_s``. Every parameter must exist in the notebook's cell tagged ``parameters``, have the type of its default
there (an int is accepted for a float; a list's elements the type of the default's elements) and lie in the range or
among the choices its comment declares:

* ``(range: LO..HI)``: inclusive bounds, either side may be omitted (``(range: 1..)``); for a list or a mapping
  it applies to each element (value);
* ``(choices: a | b | c)``: a string (or each string of a list) from a fixed set.

Seeds are integers in :data:`SEED_RANGE`. Any violation — unknown key, wrong type, out-of-range value, an empty or
non-integer seed list, a profile that is not a YAML mapping, a profile name that is not an identifier or not a file
in ``params/<chapter>/``, an unreadable notebook — raises :class:`UsageError` (exit code 2) before a single run
starts.

Two optional keys say how a scale-out backend (Ray, Slurm) places each run; neither is part of the run key:
``resources: {num_cpus: 1, num_gpus: 0.5}`` (per run; a fraction of a GPU below 1 packs runs on one GPU) and
``max_retries: 1`` (how often a run whose process died is started again).
"""

from __future__ import annotations

import ast
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agentpost.catalogue import Chapter
from agentpost.errors import UsageError, brief

PROFILE_KEYS = {"seeds", "parameters", "description", "timeout_s", "resources", "max_retries"}


#: Per-run resources a profile may ask for, and their defaults.
RESOURCE_DEFAULTS = {"num_cpus": 1, "num_gpus": 0}


DEFAULT_MAX_RETRIES = 1


#: What a chapter id and a profile name may be: they become folder names, page headings and terminal output.
PROFILE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


def profiles(chapter: Chapter) -> list[str]:
    """The chapter's profiles (:attr:`Chapter.profiles`), each name checked where it is listed: a file of
    ``params/<chapter>/`` whose name is no profile name (a newline, markup, an escape sequence) is a usage error
    naming it, so no such name reaches a page, a folder or a terminal."""
    for name in (chapter.id, *chapter.profiles):
        if not PROFILE_NAME.fullmatch(name):
            where = (
                f"catalogue chapter id {brief(name)}" if name == chapter.id else f"params/{chapter.id}/{brief(name)}"
            )
            raise UsageError(
                f"{where}: a chapter or profile name must be lower-case letters, digits, _ and - (rename it)"
            )
    return chapter.profiles


#: Seeds numpy, torch and python's random all accept.
SEED_RANGE = (0, 2**32 - 1)


_RANGE = re.compile(r"\(range:\s*(?P<low>[^()]*?)\s*\.\.\s*(?P<high>[^()]*?)\s*\)")


_CHOICES = re.compile(r"\(choices:\s*(?P<choices>[^()]*?)\s*\)")


class StrictLoader(yaml.SafeLoader):
    """YAML for profiles and ``-p`` values: the YAML 1.2 core schema's numbers and booleans (``1e-1`` is a float,
    ``4_3``, ``0b1``, ``1:20`` and ``yes`` are strings), no duplicate keys, no aliases (an alias bomb expands to
    gigabytes), and a bounded nesting depth."""

    MAX_DEPTH = 50

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed", event.start_mark)
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > self.MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested more than {self.MAX_DEPTH} levels deep", self.peek_event().start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {brief(key)}", key_node.start_mark)
            seen.add(key) if isinstance(key, (str, int, float, bool)) else None
        return super().construct_mapping(node, deep)


StrictLoader.yaml_implicit_resolvers = {
    first: [
        (tag, rx)
        for tag, rx in resolvers
        if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool")
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
)


StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def _yaml_int(loader, node):
    text = loader.construct_scalar(node)
    if len(text) > 100:
        raise yaml.constructor.ConstructorError(None, None, f"an integer of {len(text)} digits", node.start_mark)
    return int(text, 0) if text.startswith(("0o", "0x")) else int(text)


StrictLoader.add_constructor("tag:yaml.org,2002:int", _yaml_int)


def load_yaml(text: str):
    """``text`` read by :class:`StrictLoader`; raises ``yaml.YAMLError`` (with a short message) on any problem."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise yaml.YAMLError("nested too deeply") from None


def _yaml_problem(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err)
    return f"{problem[:120]}" + (f" (line {mark.line + 1}, column {mark.column + 1})" if mark else "")


def _floats(value: Any):
    """Every float in ``value`` (elements and mapping values, at any depth)."""
    if isinstance(value, float):
        yield value
    elif isinstance(value, (list, tuple, dict)):
        for v in value.values() if isinstance(value, dict) else value:
            yield from _floats(v)


def non_finite_problem(value: Any, declared: "Declared | None") -> str | None:
    """Why ``value`` holds a NaN or an infinity its declaration does not name (a bound written ``inf``), or None."""
    for x in _floats(value):
        if x != x:
            return "NaN is never a parameter value"
        if math.isinf(x) and not (declared is not None and x in (declared.low, declared.high)):
            return f"{x} is refused unless the parameter's declared range has the bound {x} (e.g. range: 0..inf)"
    return None


def parameters_cell(nb) -> Any:
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise UsageError(f"expected exactly one cell tagged 'parameters', found {len(cells)}")
    return cells[0]


def literal_assignments(source: str, where: str) -> dict[str, Any]:
    """``name = literal`` lines of a parameters (or papermill's injected-parameters) cell."""
    values: dict[str, Any] = {}
    try:
        body = ast.parse(source).body
    except SyntaxError as err:
        raise UsageError(f"{where}: the parameters cell is not valid Python (line {err.lineno}: {err.msg})") from None
    for node in body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            name, value = node.target.id, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
        else:
            raise UsageError(f"{where}: the parameters cell may only hold `name = literal` lines")
        try:
            values[name] = ast.literal_eval(value)
        except ValueError:
            raise UsageError(
                f"{where}: parameter {name!r} = {ast.unparse(value)} is not a literal "
                "(write the value itself, e.g. 4000, not an expression)"
            ) from None
    return values


def read_notebook(path: Path):
    """A notebook file, or :class:`UsageError` naming it when it is missing, empty, truncated or not a notebook."""
    import nbformat

    try:
        return nbformat.read(path, as_version=4)
    except FileNotFoundError:
        raise UsageError(f"{path.name}: no such notebook") from None
    except Exception as err:  # noqa: BLE001 - nbformat raises JSON, Unicode and schema errors alike
        raise UsageError(f"{path.name}: not a readable notebook ({type(err).__name__}: {str(err)[:200]})") from None


@dataclass(frozen=True)
class Declared:
    """The values a parameter's comment declares: an inclusive range (either bound may be None) or string choices."""

    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] | None = None

    def __str__(self) -> str:
        if self.choices is not None:
            return "choices " + " | ".join(self.choices)
        return f"range {'' if self.low is None else self.low}..{'' if self.high is None else self.high}"

    def problem(self, value: Any) -> str | None:
        """Why ``value`` (each element of a list, each value of a mapping) is outside the declaration, or None."""
        items = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else [value]
        for item in items:
            if self.choices is not None:
                if not isinstance(item, str) or item not in self.choices:
                    return f"{item!r} is not one of the {self}"
            elif isinstance(item, (int, float)) and not isinstance(item, bool):
                if item != item:
                    return f"NaN is outside its {self}"
                if (self.low is not None and item < self.low) or (self.high is not None and item > self.high):
                    return f"{brief(item)} is outside its {self}"
        return None


def _bound(text: str, name: str) -> float | None:
    if not text:
        return None
    try:
        number = float(text) if text.strip().lstrip("+-") == "inf" else ast.literal_eval(text.replace("_", ""))
    except (ValueError, SyntaxError):
        number = None
    if not isinstance(number, (int, float)) or isinstance(number, bool):
        raise UsageError(f"parameter {name!r}: the bound {text!r} of its declared range is not a number")
    return number


def parse_declaration(comment: str, name: str = "?") -> Declared | None:
    """``(range: LO..HI)`` and ``(choices: a | b)`` in a parameter's comment (None when it declares neither)."""
    found_range, found_choices = _RANGE.search(comment), _CHOICES.search(comment)
    if found_choices:
        choices = tuple(c.strip() for c in found_choices["choices"].split("|") if c.strip())
        return Declared(choices=choices)
    if found_range:
        return Declared(_bound(found_range["low"], name), _bound(found_range["high"], name))
    written = [comment.find(tag) for tag in ("(range:", "(choices:") if tag in comment]
    if written:
        raise UsageError(
            f"parameter {name!r}: write its declaration as (range: LO..HI) or (choices: a | b), "
            f"not {comment[min(written) :][:60]!r}"
        )
    return None


def notebook_parameters(notebook: Path | Any, name: str | None = None) -> tuple[dict[str, Any], dict[str, Declared]]:
    """Names and default values of the notebook's ``parameters`` cell (a path, or an already-read notebook named
    ``name`` in messages), and the range or choices each parameter's comment declares."""
    name = notebook.name if isinstance(notebook, Path) else name or "notebook"
    nb = read_notebook(notebook) if isinstance(notebook, Path) else notebook
    try:
        cell = parameters_cell(nb)
    except UsageError as err:
        raise UsageError(f"{name}: {err}") from None
    defaults = literal_assignments(cell.source, name)
    from papermill.translators import PythonTranslator

    seen_by_papermill = {p.name: p.help for p in PythonTranslator.inspect(cell)}
    if set(seen_by_papermill) != set(defaults):
        raise UsageError(
            f"{name}: papermill cannot parse the parameters {sorted(set(defaults) - set(seen_by_papermill))}"
            " (keep comments free of quotes and brackets)"
        )
    declared = {}
    for key, comment in seen_by_papermill.items():
        try:
            found = parse_declaration(comment, key)
        except UsageError as err:
            raise UsageError(f"{name}: {err}") from None
        if found is not None:
            declared[key] = found
    return defaults, declared


def notebook_defaults(notebook: Path | Any) -> dict[str, Any]:
    """Names and default values of the notebook's ``parameters`` cell (a path, or an already-read notebook)."""
    return notebook_parameters(notebook)[0]


def _type_ok(value: Any, default: Any) -> bool:
    """``value`` has the type of ``default`` (an int passes for a float; a list's elements must have the type of
    the default's elements when those share one)."""
    if default is None:
        return True
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, list) and isinstance(value, list) and default:
        kinds = {type(d) for d in default}
        return len(kinds) > 1 or all(_type_ok(v, default[0]) for v in value)
    return isinstance(value, type(default))


def _element_promoted(value: Any, default: Any) -> Any:
    if isinstance(default, float):
        return float(value)
    if isinstance(default, list) and default and all(isinstance(d, float) for d in default):
        return [float(v) for v in value]
    return value


def check_parameters(
    chapter: Chapter,
    parameters: dict,
    *,
    source: str,
    defaults: dict | None = None,
    declared: dict[str, Declared] | None = None,
) -> dict:
    """Check names, types and declared ranges/choices against the notebook's parameters cell (read from it when
    not given); returns the parameters with ints promoted to float where due."""
    if defaults is None:
        defaults, declared = notebook_parameters(chapter.notebook)
    declared = declared or {}
    known = ", ".join(sorted(k for k in defaults if k != "seed"))
    checked = {}
    for key, value in parameters.items():
        if key == "seed":
            raise UsageError(
                f"{source}: 'seed' is set by the seed list (--seeds or the profile's `seeds:`), not as a parameter"
            )
        if key not in defaults:
            raise UsageError(f"{source}: unknown parameter {key!r} for {chapter.id} (known: {known})")
        default = defaults[key]
        if not _type_ok(value, default):
            like = (
                f"{type(default).__name__} of {type(default[0]).__name__}"
                if isinstance(default, list) and default
                else type(default).__name__
            )
            raise UsageError(
                f"{source}: parameter {key!r} must be {like} like its default {brief(default)}, "
                f"got {type(value).__name__} {brief(value)}"
            )
        if isinstance(value, (list, dict)) and not value and default:
            raise UsageError(
                f"{source}: parameter {key!r} is empty, but its default {brief(default)} is not: a list or mapping "
                "parameter (a grid, a set of budgets) needs at least one element"
            )
        if why := non_finite_problem(value, declared.get(key)):
            raise UsageError(f"{source}: parameter {key!r} = {brief(value)}: {why}")
        if key in declared and (why := declared[key].problem(value)):
            raise UsageError(f"{source}: parameter {key!r} = {brief(value)}: {why}")
        checked[key] = _element_promoted(value, default)
    return checked


def load_profile(chapter: Chapter, profile: str) -> dict:
    """The profile file ``params/<chapter>/<profile>.yaml``; ``profile`` must be an identifier naming one of them,
    so nothing outside the repository is ever read or written through a profile name."""
    known = profiles(chapter)
    if not isinstance(profile, str) or not PROFILE_NAME.match(profile) or profile not in known:
        what = (
            "is not a profile name (lower-case letters, digits, _ and -)"
            if not PROFILE_NAME.match(str(profile))
            else "is not a profile"
        )
        raise UsageError(
            f"{chapter.id}: {profile!r} {what}; known profiles in params/{chapter.id}/: {', '.join(known) or 'none'}"
        )
    path = chapter.profile_path(profile)
    where = f"params/{chapter.id}/{path.name}"
    if path.is_symlink() or not path.is_file():
        raise UsageError(f"{where}: not a regular file of the repository (a profile is never a link or a device)")
    try:
        raw = load_yaml(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise UsageError(f"{where}: not UTF-8 text (byte {err.start}: {err.reason})") from None
    except yaml.YAMLError as err:
        raise UsageError(f"{where}: invalid YAML: {' '.join(_yaml_problem(err).split())}") from None
    except OSError as err:
        raise UsageError(f"{where}: cannot be read: {err.strerror}") from None
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise UsageError(
            f"{where}: must be a YAML mapping with keys {sorted(PROFILE_KEYS)}, got a {type(raw).__name__}"
        )
    unknown = set(map(str, raw)) - PROFILE_KEYS
    if unknown:
        raise UsageError(
            f"{where}: unknown profile keys {brief(sorted(unknown), 200)} (allowed: {sorted(PROFILE_KEYS)})"
        )
    if not isinstance(raw.get("parameters") or {}, dict):
        raise UsageError(
            f"{where}: `parameters:` must be a mapping of name: value, got a {type(raw['parameters']).__name__}"
        )
    timeout = raw.get("timeout_s")
    if timeout is not None and (not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 1):
        raise UsageError(
            f"{where}: `timeout_s:` must be a positive number of seconds (an integer), got {brief(timeout)}"
        )
    placement(raw, where)
    return raw


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def placement(raw: dict, source: str) -> tuple[dict, int]:
    """A profile's per-run ``resources`` (defaults filled in) and ``max_retries``, checked."""
    resources = raw.get("resources", {})
    if not isinstance(resources, dict):
        raise UsageError(
            f"{source}: resources must be a mapping like {{num_cpus: 1, num_gpus: 0.5}}, got {brief(resources)}"
        )
    unknown = sorted(map(str, set(resources) - set(RESOURCE_DEFAULTS)))
    if unknown:
        raise UsageError(f"{source}: unknown resources {brief(unknown, 200)} (allowed: {sorted(RESOURCE_DEFAULTS)})")
    resources = {**RESOURCE_DEFAULTS, **resources}
    cpus, gpus = resources["num_cpus"], resources["num_gpus"]
    if not _number(cpus) or cpus <= 0:
        raise UsageError(f"{source}: resources.num_cpus must be a number > 0, got {brief(cpus)}")
    if not _number(gpus) or gpus < 0 or (gpus > 1 and gpus != int(gpus)):
        raise UsageError(
            f"{source}: resources.num_gpus must be a whole number >= 0 or a fraction below 1 "
            f"(several runs share one GPU), got {brief(gpus)}"
        )
    retries = raw.get("max_retries", DEFAULT_MAX_RETRIES)
    if not isinstance(retries, int) or isinstance(retries, bool) or not 0 <= retries <= 10:
        raise UsageError(f"{source}: max_retries must be an integer from 0 to 10, got {brief(retries)}")
    return resources, retries


def parse_overrides(pairs: list[str]) -> dict:
    """``KEY=VALUE`` strings; VALUE is parsed as YAML (``3``, ``0.5``, ``true``, ``[1, 2]``, ``text``)."""
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if not _ or not key.strip():
            raise UsageError(f"-p expects KEY=VALUE, got {brief(pair)}")
        if key.strip() in out:
            raise UsageError(f"-p {key.strip()[:60]} is given more than once; give each parameter once")
        try:
            out[key.strip()] = load_yaml(value)
        except yaml.YAMLError as err:
            problem = getattr(err, "problem", None) or str(err) or "not valid YAML"
            raise UsageError(
                f"-p {key.strip()[:60]}: the value {brief(value)} does not parse ({problem[:120]})"
            ) from None
    return out


def parse_seeds(text: str | None, profile_seeds: Any, source: str) -> list[int]:
    """The seed list (``--seeds 42,43`` or the profile's ``seeds:``): distinct integers in :data:`SEED_RANGE`."""
    seeds = profile_seeds if text is None else [s for s in text.split(",") if s.strip()]
    if seeds is not None and not isinstance(seeds, list):
        raise UsageError(f"{source}: seeds must be a list of integers, got {type(seeds).__name__} {brief(seeds)}")
    if not seeds:
        raise UsageError(f"{source}: the seed list is empty; give --seeds 42,43,44 or `seeds:` in the profile")
    parsed: list[int] = []
    for i, s in enumerate(seeds):
        seed = s
        if isinstance(s, str):  # ASCII digits only: not '٤٣', '4_3', '+44' or '1e3'
            seed = int(s.strip()) if re.fullmatch(r"-?[0-9]{1,20}", s.strip()) else None
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise UsageError(
                f"{source}: seeds must be integers, got {brief(s)} (seed {i + 1} of {len(seeds)}; "
                "written in the digits 0-9)"
            )
        parsed.append(seed)
    low, high = SEED_RANGE
    outside = [s for s in parsed if not low <= s <= high]
    if outside:
        raise UsageError(f"{source}: seeds {brief(outside, 120)} are outside the seed range {low}..{high}")
    if len(set(parsed)) != len(parsed):
        twice = sorted(s for s, n in Counter(parsed).items() if n > 1)
        raise UsageError(f"{source}: duplicate seeds {brief(twice, 120)} (each seed is one replication; give it once)")
    return parsed


def profile_parameters(
    chapter: Chapter, profile: str, overrides: dict, defaults: dict, declared: dict[str, Declared] | None = None
) -> dict:
    """The parameters of a run: the profile file's, then the overrides, checked against the notebook's parameters
    cell (defaults and declared ranges).

    The one rule both planning and ``agentpost validate`` apply."""
    raw = load_profile(chapter, profile)
    parameters = check_parameters(
        chapter,
        dict(raw.get("parameters") or {}),
        source=f"params/{chapter.id}/{profile}.yaml",
        defaults=defaults,
        declared=declared,
    )
    parameters.update(check_parameters(chapter, overrides, source="-p", defaults=defaults, declared=declared))
    return parameters
