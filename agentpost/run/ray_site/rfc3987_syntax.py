"""Stands in for rfc3987-syntax in the processes a local Ray cluster started by agentpost spawns (this folder is put
first on their PYTHONPATH by :func:`agentpost.run.backends.init_ray`).

jsonschema imports rfc3987-syntax when it is installed, only for its ``iri`` format checker (no schema of ours uses
it), and that import compiles an Earley grammar: about 3 s of CPU, over 10 s of wall time on a loaded machine. Ray's
dashboard agent imports jsonschema at start-up and the raylet gives the agent a fixed 15 s, so ``ray.init`` failed
("The current node timed out during startup"). Failing the import at once makes jsonschema skip that one checker,
as :func:`agentpost.project.skip_slow_optional_imports` does inside agentpost's own processes.
"""

raise ImportError("rfc3987_syntax is skipped in the Ray processes agentpost starts (agentpost.run.ray_site)")
