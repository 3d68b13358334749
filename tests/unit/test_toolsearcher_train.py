"""The trainer on the SYNTHETIC stand-in world of test_toolsearcher_loss (mechanics only, no retrieval model)."""

import numpy as np
import pytest
import torch

from agentpost.toolsearcher.policy import PRIOR_THETA, LogLinearPolicy
from agentpost.toolsearcher.train import TrainConfig, _credit, episode_metrics, train


class FakeWorld:
    def __init__(self, env, doc_emb, centroids):
        self.env, self.doc_emb, self.centroids = env, doc_emb, centroids

    def policy(self, theta=None):
        return LogLinearPolicy(self.env, self.doc_emb, self.centroids, theta, category_options=2)


@pytest.fixture(scope="module")
def fake():
    from tests.unit.test_toolsearcher_loss import CATS, SyntheticRetriever
    from agentpost.toolsearcher.env import SearchEnv, clauses
    from agentpost.toolsearcher.policy import Task

    rng = np.random.default_rng(3)
    ret = SyntheticRetriever(rng)
    env = SearchEnv(ret, [f"doc {n}" for n in ret.names], topk=3, max_turns=4, max_response_tokens=30)
    cent = np.stack([ret.doc_emb[ret.categories == c].mean(0) for c in CATS])
    cent /= np.linalg.norm(cent, axis=1, keepdims=True)
    tasks = []
    for u in range(4):
        cl = clauses(f"Task {u} wants one thing. Task {u} wants another thing.")
        emb = rng.normal(size=(len(cl), 8))
        emb /= np.linalg.norm(emb, axis=1, keepdims=True)
        ret.memo.update(zip(cl, emb))
        tasks.append(Task(f"t{u}", (ret.names[u], ret.names[u + 4]), cl, emb))
    return FakeWorld(env, ret.doc_emb, cent), tasks


def test_config_is_validated():
    with pytest.raises(ValueError, match="arm must be"):
        TrainConfig(arm="ppo")
    with pytest.raises(ValueError, match="rollouts_per_prompt"):
        TrainConfig(rollouts_per_prompt=1)
    with pytest.raises(ValueError, match="cctd_mode"):
        TrainConfig(cctd_mode="forced")


@pytest.mark.parametrize("arm", ["toolsearcher", "grpo"])
def test_train_is_deterministic_and_moves_theta(fake, arm):
    world, tasks = fake
    cfg = TrainConfig(arm=arm, steps=3, prompts_per_step=2, rollouts_per_prompt=3, lr=0.1, cctd_fraction=0.34)
    a, b = train(world, tasks, cfg, 7), train(world, tasks, cfg, 7)
    assert np.array_equal(a["theta"], b["theta"]) and not np.allclose(a["theta"], PRIOR_THETA)
    assert [h["cctd"] for h in a["history"]] == [True, False, False]
    assert all(h["dropped"] == 0 for h in a["history"])


def test_outcome_arm_puts_one_advantage_on_every_assistant_token(fake):
    world, tasks = fake
    pol = world.policy()
    group = [pol.run(tasks[0], np.random.default_rng(i)) for i in range(3)]
    from agentpost.toolsearcher.policy import layout

    lay = layout(group)
    adv, mask, dropped, rewards = _credit(TrainConfig(arm="grpo"), group, tasks[0], lay.mask)
    for i in range(3):
        vals = adv[i][lay.mask[i] == 1].unique()
        assert vals.numel() == 1 and torch.all(adv[i][lay.mask[i] == 0] == 0)
    m = episode_metrics(group[0], tasks[0].targets)
    assert set(m) == {"f1", "exact", "srecall", "searches", "answered"}


def test_run_seed_trains_each_reading_once_and_selects_on_validation(fake):
    from agentpost.toolsearcher.train import VARIANTS, data_version, run_seed

    world, tasks = fake
    cfg = TrainConfig(steps=2, prompts_per_step=2, rollouts_per_prompt=3, lr=0.1, gate="before_norm")
    a = run_seed(world, tasks, tasks[:2], tasks[2:], cfg, 7)
    rows = a["variants"]
    assert [(r["arm"], r["gate"], r["nondiscovery"]) for r in rows] == list(
        VARIANTS.values()
    )  # base's reading is one of them
    assert rows[a["default"]]["gate"] == "before_norm" and rows[a["grpo"]]["arm"] == "grpo"
    assert {r["updates"] for r in rows} == {2}  # counted optimizer steps, not the parameter
    best = max(r["val"]["f1"] for r in rows if r["arm"] == "toolsearcher")
    assert rows[a["selected"]]["arm"] == "toolsearcher" and rows[a["selected"]]["val"]["f1"] == best
    assert all(len(r["test"]["f1"]) == 2 for r in rows)
    b = run_seed(world, tasks, tasks[:2], tasks[2:], cfg, 8)
    # a seed is a replication: another seed trains other policies (different sampled rollouts)
    assert any(
        not np.array_equal(x["history"][0]["reward"], y["history"][0]["reward"])
        or x["history"][-1]["loss"] != y["history"][-1]["loss"]
        for x, y in zip(rows, b["variants"])
    )
    assert data_version(tasks) == data_version(tasks) != data_version(tasks[::-1])
    with pytest.raises(ValueError, match="toolsearcher arm"):
        run_seed(world, tasks, tasks[:2], tasks[2:], TrainConfig(arm="grpo"), 7)
    with pytest.raises(ValueError, match="outcome-GRPO"):
        run_seed(world, tasks, tasks[:2], tasks[2:], cfg, 7, variants=list(VARIANTS.values())[1:])
