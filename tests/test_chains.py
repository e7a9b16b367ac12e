"""Sampling hygiene and chain health (issue 16): banned special tokens, the stop after a cut item, the task hooks
that judge sketches, the sketch budget, and stage1=auto's rule."""

from __future__ import annotations

import copy
import random
from dataclasses import replace

import pytest
import torch

from sesa_cli.models.special import banned_ids, stop_ids_for, suppressed_ids
from sesa_cli.models.tiny import build_tokenizer
from sesa_cli.rollout.engine import Engine, SamplingParams
from sesa_cli.rollout.samplers import make_sampler
from sesa_cli.rollout.scoring import build_batch, completion_logps
from sesa_cli.tasks import countdown as countdown_module
from sesa_cli.tasks import math as math_module
from sesa_cli.tasks import safe_arith
from sesa_cli.tasks.base import Score
from sesa_cli.terms import TermContext
from sesa_cli.terms.follow import Follow, FollowSettings
from tests.conftest import compose_train, sketch_of
from tests.levels import LEVELS
from tests.test_agent_tasks import make as make_agent


# ------------------------------------------------------------------------------------------------ banned tokens
def test_banned_ids_are_bos_pad_unk_but_never_a_stop_id():
    tok = build_tokenizer("ab|")
    stops = [tok.convert_tokens_to_ids("|"), tok.eos_token_id]
    assert banned_ids(tok, stops) == sorted([tok.bos_token_id, tok.pad_token_id, tok.unk_token_id])
    # a tokenizer whose PAD is its EOS (common for real models): EOS ends answers, so it is never banned
    tok.pad_token = tok.eos_token
    assert tok.pad_token_id == tok.eos_token_id
    assert banned_ids(tok, stops) == sorted([tok.bos_token_id, tok.unk_token_id])
    # SmolLM2's base tokenizer: one id for BOS, EOS, UNK and PAD -> nothing is banned
    tok.bos_token = tok.unk_token = tok.eos_token
    assert banned_ids(tok, stops) == []


def test_loaded_policy_bans_the_rule_s_ids(path_setup):
    _, task, policy = path_setup
    tok = policy.tokenizer
    assert suppressed_ids(policy.model) == banned_ids(tok, stop_ids_for(policy, task))
    assert set(suppressed_ids(policy.model)) == {tok.bos_token_id, tok.pad_token_id, tok.unk_token_id}


class _FavourIds(torch.nn.Module):
    """An output head that adds ``bonus`` to some ids' logits (a model that wants to emit them)."""

    def __init__(self, head: torch.nn.Module, ids: list[int], bonus: float) -> None:
        super().__init__()
        self.head = head
        self.register_buffer("bonus", torch.zeros(head.weight.shape[0]))
        self.bonus[ids] = bonus

    @property
    def weight(self) -> torch.Tensor:
        return self.head.weight

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden) + self.bonus


def _favouring_policy(path_setup):
    _, _, policy = path_setup
    policy = copy.deepcopy(policy)
    tok = policy.tokenizer
    policy.model.lm_head = _FavourIds(policy.model.lm_head, [tok.bos_token_id, tok.pad_token_id], 12.0)
    return policy


def test_bos_and_pad_are_never_sampled_and_logps_match_scoring(path_setup):
    policy = _favouring_policy(path_setup)
    tok = policy.tokenizer
    prompt = [tok.bos_token_id, *policy.encode("P:")]
    stop = [tok.convert_tokens_to_ids("|")]

    def draw(seed: int):
        eng = Engine(policy.model, tok.pad_token_id)
        return eng.start([prompt] * 16).sample(12, stop, SamplingParams(), torch.Generator().manual_seed(seed))

    banned = set(suppressed_ids(policy.model))
    saved = policy.model.generation_config.suppress_tokens
    policy.model.generation_config.suppress_tokens = None
    unmasked = [t for c in draw(0) for t in c.ids]
    assert sum(t in banned for t in unmasked) > len(unmasked) / 2  # the head does favour BOS and PAD
    policy.model.generation_config.suppress_tokens = saved
    comps = draw(0)
    assert all(t not in banned for c in comps for t in c.ids)
    batch = build_batch([prompt] * len(comps), [c.ids for c in comps], tok.pad_token_id)
    with torch.no_grad():
        scored, ents = completion_logps(policy.model, batch)
    for i, comp in enumerate(comps):
        assert torch.allclose(scored[i, : len(comp.ids)], torch.tensor(comp.logps), atol=1e-4)
        assert torch.allclose(ents[i, : len(comp.ids)], torch.tensor(comp.entropies), atol=1e-4)
    assert torch.isfinite(scored).all()  # padding targets (PAD is banned) stay finite outside the response mask


def test_greedy_decoding_with_banned_ids_matches_generate(path_setup):
    policy = _favouring_policy(path_setup)
    tok = policy.tokenizer
    prompt = [tok.bos_token_id, *policy.encode("P:")]
    ours = Engine(policy.model, tok.pad_token_id).start([prompt]).sample(10, [], SamplingParams(0.0))[0]
    with torch.no_grad():  # generate() honours generation_config.suppress_tokens, the field the ban lives in
        ref = policy.model.generate(
            torch.tensor([prompt]), max_new_tokens=10, do_sample=False, pad_token_id=tok.pad_token_id
        )
    assert ours.ids == ref[0, len(prompt) :].tolist()


# ---------------------------------------------------------------------------------------- the stop after a cut item
def _sampler(path_setup, task_kw=None, **kw):
    cfg, task, policy = path_setup
    if task_kw:
        task = type(task)(replace(cfg.task, **task_kw), cfg.seed)
    return make_sampler(replace(cfg.sampler, **kw), task, policy), task, policy


def test_a_cut_solution_is_followed_by_the_stop_before_the_next_one(path_setup):
    # 5 tokens cut most paths ("kesu/..." is longer), so most items of the chain are cut
    sampler, task, policy = _sampler(
        path_setup, task_kw={"max_new_tokens": 5}, name="sequential", stage1="solution", group_size=4
    )
    stop = policy.encode(task.stop)
    groups = sampler.sample([None, None, None], torch.Generator().manual_seed(0))
    cuts = 0
    for group in groups:
        expected = sampler.encode_prompt(task.prompt(None))
        for k, r in enumerate(group):
            assert r.context_ids == expected
            cut = not r.completion.stopped
            assert r.stop_forced == (cut and k < len(group) - 1)
            cuts += cut
            expected = expected + r.completion.ids + (stop if cut else []) + policy.encode(task.between)
    LEVELS["cut_items_at_5_tokens"].check(cuts)


def test_a_cut_sketch_is_followed_by_the_stop_before_the_next_one(path_setup):
    sampler, task, policy = _sampler(path_setup, name="sequential", stage1="sketch", group_size=4, sketch_max_tokens=1)
    stop = policy.encode(task.stop)
    head = sampler.encode_prompt(task.sketch_head(None))
    for group in sampler.sample([None, None], torch.Generator().manual_seed(0)):
        expected = list(head)
        for k, r in enumerate(group):
            sketch = sketch_of(r)
            assert sketch.context_ids == expected
            cut = not sketch.completion.stopped
            assert cut  # no sketch fits in 1 token (a region name is one, its stop another)
            assert r.stop_forced == sketch.stop_forced == (k < 3)
            expected = expected + sketch.completion.ids + stop


def test_the_sketch_budget_defaults_to_the_task_s(path_setup):
    sampler, task, _ = _sampler(path_setup, name="sequential", stage1="sketch", sketch_max_tokens=0)
    assert sampler.sketch_max_tokens == task.sketch_max_tokens() == max(map(len, task.tree)) + 1
    sampler, _, _ = _sampler(path_setup, name="sequential", stage1="sketch", sketch_max_tokens=3)
    assert sampler.sketch_max_tokens == 3


# --------------------------------------------------------------------------------------------- chain health
def test_chain_health_of_a_sampled_batch_matches_its_rollouts(path_setup):
    sampler, task, _ = _sampler(path_setup, name="sequential", stage1="sketch", group_size=4, solutions_per_sketch=2)
    groups = sampler.sample([None] * 3, torch.Generator().manual_seed(1))
    health = sampler.chain_health(groups)
    assert health.chains == 3
    assert len(health.valid) == 4
    sketches = [sketch_of(r).text for g in groups for r in g[::2]]
    assert sum(health.valid) * 3 == pytest.approx(sum(task.sketch_key(None, s) is not None for s in sketches))
    judged = [task.follows_sketch(None, sketch_of(r).text, r.text, r.score) for g in groups for r in g]
    assert health.followed_all == pytest.approx(sum(judged) / len(judged))
    # evaluation may draw several chains per group, one after another; a partial chain at the end is left out
    assert sampler.chain_health([g + g + g[:5] for g in groups]).chains == 6


def test_path_sketch_hooks(path_setup):
    _, task, _ = path_setup
    region = next(iter(task.tree))
    city = next(iter(task.tree[region]))
    assert task.sketch_key(None, region + "|") == region
    assert task.sketch_key(None, " " + region + "|junk") == region
    for bad in ("", "|", region + "x|", "P:" + region, region + "/" + city):
        assert task.sketch_key(None, bad) is None
    path = f"{region}/{city}/{task.tree[region][city][0]}|"
    assert task.follows_sketch(None, region + "|", path, task.score(None, path))
    other = next(r for r in task.tree if r != region)
    assert not task.follows_sketch(None, other + "|", path, task.score(None, path))
    assert not task.follows_sketch(None, "nope|", path, task.score(None, path))


@pytest.mark.parametrize("name", ["frozenlake", "sokoban", "sudoku"])
def test_agent_plans_warm_start_pairs_follow_and_fit_the_budget(name):
    task = make_agent(name)
    rng = random.Random(0)
    for i in range(40):
        inst = task.instance("train", i)
        plan = task.random_plan(inst, rng)
        sketch = task.sketch(plan)
        assert len(sketch) <= task.sketch_max_tokens()
        # a plan is keyed by what it does, as the episode that plays it is (moves that change nothing add nothing)
        m = task.cfg.max_actions_per_turn
        turns = [task.response(plan[i : i + m]) for i in range(0, len(plan), m)]
        assert task.sketch_key(inst, sketch) == task.play(inst, turns)[1].key
        text, score = task.play(inst, task._random_responses(inst, rng, plan))
        assert task.follows_sketch(inst, sketch, text, score)
    inst = task.instance("train", 0)
    assert task.sketch_key(inst, "") is None
    assert task.sketch_key(inst, "Z|" if name != "sudoku" else "999999|") is None
    plan = task.random_plan(inst, rng)
    assert not task.follows_sketch(inst, task.sketch(plan), "", Score(0.0, False, None))  # nothing played


def test_agent_plan_followed_means_its_actions_were_played_first():
    task = make_agent("frozenlake")
    inst = task.instance("train", 0)
    sketch = task.sketch(["Down", "Right", "Down"])

    def played(*actions: str) -> Score:  # the key is what the states did: only the executed actions are read here
        return Score(0.0, False, "?", actions=actions)

    assert task.follows_sketch(inst, sketch, "", played("Down", "Right", "Down", "Left"))
    assert task.follows_sketch(inst, sketch, "", played("Down", "Right"))  # the episode ended early
    assert not task.follows_sketch(inst, sketch, "", played("Right", "Down", "Down"))
    assert task.sketch_max_tokens() == task.cfg.max_actions + 1
    assert make_agent("frozenlake", "chat").sketch_max_tokens() == task.cfg.max_new_tokens


def test_countdown_step_hooks():
    cfg = compose_train(["task=countdown"])
    task = countdown_module.CountdownTask(cfg.task, 0)
    rng = random.Random(0)
    for i in range(60):
        inst = task.instance("train", i)
        nums = list(inst.nums)
        rng.shuffle(nums)
        first = countdown_module._random_step(rng, nums[0], nums[1])
        answer = safe_arith.render(countdown_module._random_tree(rng, [first, *nums[2:]])) + "|"
        sketch = safe_arith.render(first[1]) + "|"
        assert len(sketch) <= task.sketch_max_tokens()
        assert task.sketch_key(inst, sketch) is not None
        assert task.follows_sketch(inst, sketch, answer, task.score(inst, answer))
    inst = task.instance("train", 0)
    a, b, c = inst.nums[:3]
    assert task.sketch_key(inst, f"{a}+{b}|") == task.sketch_key(inst, f"{b}+{a}|")
    assert task.sketch_key(inst, f"{a}+{b}+{c}|") is None  # two operations
    assert task.sketch_key(inst, "99+98|") is None  # numbers the puzzle does not have
    answer = f"{c}*{a}+{b}|"
    assert not task.follows_sketch(inst, f"{a}+{b}|", answer, task.score(inst, answer))
    assert task.follows_sketch(inst, f"{c}*{a}|", answer, task.score(inst, answer))


def test_has_step_is_up_to_associativity_and_commutativity():
    cases = [
        ("3+4+5", (4, "+", 5), True),
        ("3*4+5", (4, "+", 5), False),
        ("7-(4-5)", (4, "-", 5), True),
        ("7-4+5", (4, "+", 5), False),
        ("(4+5)*3", (5, "+", 4), True),
        ("8/(4/2)", (4, "/", 2), True),
        ("8/4/2", (4, "/", 2), False),
        ("2+3", (2, "+", 2), False),
        ("2+2", (2, "+", 2), True),
    ]
    for expr, step, expected in cases:
        node = safe_arith.parse(expr)
        assert node is not None
        assert safe_arith.has_step(node, *step) is expected, (expr, step)


def test_math_step_hooks():
    cfg = compose_train(["task=math"])
    task = math_module.MathTask(cfg.task, 0)
    rng = random.Random(0)
    for i in range(60):
        inst = task.instance("train", i)
        assert inst.expr
        step, answer = math_module._random_step(rng, inst.expr)
        sketch = step + "|"
        assert len(sketch) <= task.sketch_max_tokens()
        assert task.sketch_key(inst, sketch) is not None
        assert task.follows_sketch(inst, sketch, answer + "|", task.score(inst, answer + "|"))
    inst = task.instance("train", 0)
    assert task.sketch_key(inst, "1+1+1=3|") is None
    assert task.sketch_key(inst, "garbage|") is None
    assert not task.follows_sketch(inst, "garbage|", inst.answer + "|", task.score(inst, inst.answer + "|"))


def test_path_corpus_lists_never_end_before_list_max_and_pairs_follow(path_setup):
    _, task, _ = path_setup
    lines = task.warm_start_corpus(random.Random(0), 400)
    kinds = {"P:": 0, "S:": 0, "pair": 0}
    for line in lines:
        if line.startswith("P:"):
            items = line[2:].split("|")
            assert items[-1] == ""
            assert len(items) - 1 == task.cfg.list_max == len(set(items[:-1]))
            assert all(task.parse(p + task.stop) for p in items[:-1])
            kinds["P:"] += 1
        elif line.startswith("S:"):
            items = line[2:].split("|")[:-1]
            assert sorted(items) == sorted(task.tree)  # every region once
            kinds["S:"] += 1
        else:
            head, path = line.split(":", 1)
            assert task.follows_sketch(None, head[1:] + "|", path, task.score(None, path))
            kinds["pair"] += 1
    assert min(kinds.values()) > 40


# ------------------------------------------------------------------------------------------------ stage1=auto
def test_stage1_auto_drafts_sketches_only_for_tasks_whose_base_follows_them(path_setup):
    import sesa_cli.tasks  # noqa: F401  (registers every task)
    from sesa_cli.rollout.samplers import resolve_stage1
    from sesa_cli.tasks.base import TASKS, Task, make_task
    from sesa_cli.tasks.countdown import CountdownTaskConfig

    cfg, path, _ = path_setup
    auto = replace(cfg.sampler, name="sequential", stage1="auto")
    assert resolve_stage1(auto, path) == "sketch"
    # the agent tasks as their tiny recipes configure them (first-turn plans, plan lines in the warm start): followed
    # 0.96-0.99 at the base; whole-episode plans, a base without plan lines, or chat style: not measured to be followed
    for name in ("frozenlake", "sokoban"):
        one_turn = {"max_actions_per_turn": 2, "sketch_max_actions": 2, "warm_start_plan_lines": 0.5}
        assert resolve_stage1(auto, make_agent(name, **one_turn)) == "sketch", name
        assert resolve_stage1(auto, make_agent(name, "chat", **one_turn)) == "solution", name
        assert resolve_stage1(auto, make_agent(name, **{**one_turn, "warm_start_plan_lines": 0.0})) == "solution"
        assert resolve_stage1(auto, make_agent(name, **{**one_turn, "sketch_max_actions": 0})) == "solution", name
    frozenlake = make_agent("frozenlake")
    assert frozenlake.has_sketch()
    assert resolve_stage1(auto, frozenlake) == "solution"
    assert resolve_stage1(replace(auto, stage1="sketch"), frozenlake) == "sketch"  # still one override away
    for style, stage1 in (("compact", "sketch"), ("chat", "solution")):  # Countdown's step words are compact-only
        countdown = make_task(CountdownTaskConfig(name="countdown", style=style))
        assert resolve_stage1(auto, countdown) == stage1, style
    unmeasured = {name for name, cls in TASKS.items() if cls.sketch_followed is Task.sketch_followed}
    assert {"sudoku", "math"} <= unmeasured
    assert not {"path", "frozenlake", "sokoban", "countdown"} & unmeasured
    for name, cls in TASKS.items():  # every task with a sketch can say which are valid and when one is followed
        if cls.sketch_head is not Task.sketch_head:
            assert cls.sketch_key is not Task.sketch_key, name
            assert cls.follows_sketch is not Task.follows_sketch, name


# ------------------------------------------------------------------------------------ the sketch is followed at base
def _two_stage_health(cfg, task, policy, chains: int, seed: int = 0):
    sampler = make_sampler(replace(cfg.sampler, name="sequential", stage1="auto"), task, policy)
    assert sampler.stage1 == "sketch"
    return sampler.chain_health(sampler.sample([None] * chains, torch.Generator().manual_seed(seed)))


def test_stage_two_follows_its_sketch_at_the_test_base(path_setup):
    # The test world (4 regions), seed 0: 0.61-0.83 of the stage-II paths start with the sketched region (chance:
    # 0.25) and 0-6% of the sketches are cut, depending on the base's float rounding (six kernel choices on two CPUs:
    # tests/levels.py); the warm-start corpus before issue 16 gave 0.21 and 11%.
    cfg, task, policy = path_setup
    health = _two_stage_health(cfg, task, policy, chains=32)
    assert health.followed_all is not None
    LEVELS["stage_two_followed"].check(health.followed_all)
    LEVELS["stage_one_cut"].check(float(torch.tensor(health.cut).mean()))


def _plans_followed(cfg, task, policy, parallel_rows: int = 0) -> float:
    """Share of stage-II episodes that play their plan's first turn: 16 chains of group_size - parallel_rows (8 by
    default), sampling seed 0, the sketches stage1=auto picks (Task.sketch_followed)."""
    sampler = make_sampler(replace(cfg.sampler, name="sequential", parallel_rows=parallel_rows), task, policy)
    assert sampler.stage1 == "sketch"
    instances = [task.instance("val", i) for i in range(16)]
    health = sampler.chain_health(sampler.sample(instances, torch.Generator().manual_seed(0)))
    assert health.followed_all is not None
    return health.followed_all


def test_agent_plans_are_carried_out_at_the_test_base(frozenlake_setup):
    # Issue 29: two-stage sampling on an agent task is SESA only when stage II plays the plan it was given. The test
    # base (FrozenLake as model=tiny learns it, 300 warm-start steps on 4000 lines: the word vocabulary, a quoted
    # plan one token) follows its first-turn plans in most episodes; docs/samplers.md has the default base's figures.
    LEVELS["agent_plans_followed"].check(_plans_followed(*frozenlake_setup))


def test_sokoban_plans_are_carried_out_at_a_small_base(sokoban_setup):
    # The same for Sokoban (6x6, one box; one action a turn and first-turn plans, as its tiny recipe sets them), in
    # the recipe's chains of 4: only 4 one-move plans exist, and a chain of 8 ends its list with empty sketches.
    cfg, task, policy = sokoban_setup
    LEVELS["sokoban_plans_followed"].check(_plans_followed(cfg, task, policy, cfg.sampler.parallel_rows))


def test_countdown_stage_two_carries_out_its_sketch_at_a_small_base(countdown_setup):
    # The solve prompt ends with the sketched step as one word, ``P7:1,3,4!(3+4)``, and an answer that carries the
    # step out starts with that word (CountdownTask.vocabulary): on the small base 0.72 of stage II's solutions follow
    # their sketch at sampling seed 0 (0.94-0.96 of those whose sketch is valid); the full base follows 0.94, the
    # layout before it 0.18 (docs/samplers.md).
    cfg, task, policy = countdown_setup
    sampler = make_sampler(replace(cfg.sampler, name="sequential", stage1="sketch", parallel_rows=0), task, policy)
    instances = [task.instance("val", i) for i in range(16)]
    groups = sampler.sample(instances, torch.Generator().manual_seed(0))
    health = sampler.chain_health(groups)
    assert health.followed_all is not None
    LEVELS["countdown_stage_two_followed"].check(health.followed_all)
    follow = Follow(FollowSettings(1.0), TermContext(task, policy.encode, lambda items: items))
    first: dict[int, int | None] = {}
    for r in (r for group in groups for r in group):
        # the follow term's target (algo.terms.follow) is the word the solve prompt ends with, for every valid sketch
        sketch = sketch_of(r)
        valid = task.sketch_key(r.inst, sketch.text) is not None
        assert follow.target(r, sketch, first) == (r.context_ids[-1] if valid else None)
        assert not r.origin.followed or valid


@pytest.mark.slow
def test_default_path_base_meets_issue_16_chain_health(tmp_path_factory):
    """The acceptance numbers on the default 8x8x8 world and G = 8 (builds its base: minutes on one thread)."""
    from sesa_cli.models.loading import load_policy
    from sesa_cli.tasks.base import make_task

    cfg = compose_train(["task=path", f"model.cache_dir={tmp_path_factory.mktemp('default-path')}"])
    task = make_task(cfg.task, cfg.seed)
    health = _two_stage_health(cfg, task, load_policy(cfg.model, task), chains=64)
    assert health.followed_all is not None
    LEVELS["default_base_followed"].check(health.followed_all)
    LEVELS["default_base_cut"].check(float(torch.tensor(health.cut).mean()))
    LEVELS["default_base_distinct"].check(health.distinct)
