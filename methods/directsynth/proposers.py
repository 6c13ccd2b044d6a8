"""Proposers of heuristic programs, all behind ``propose(feedback) -> program text``.

``feedback`` lists, per rejected program, its counterexample or its error message (empty for
the sample-and-select baseline, which therefore draws from the same proposer without
guidance).

- :class:`GrammarProposer`: an offline program synthesizer. Programs are weighted sums (and
  maxima) of task features (goal count, h_add, h_max, h_FF, landmark count, per-predicate fact
  and open-goal counts), enumerated by size in a seeded order. Given counterexamples it
  computes the features along each counterexample's improving path and at the successors of
  its state, and proposes only programs that no counterexample seen so far refutes (the path
  stops improving, or the state gets an improving successor): every repair fixes each
  violation it was shown, including dead ends, which can only be fixed by leaving them.
- :class:`LanguageModelProposer`: a prompt with the domain, an example task, the program
  template and, for repairs, the last counterexample; the reply's code block is the program.
  Text generation comes from a transformers model (:func:`transformers_generator`) or an
  OpenAI-compatible chat endpoint (:func:`http_generator`).
"""

from __future__ import annotations

import itertools
import json
import re
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from common.errors import UserError
from methods.directsynth.features import TaskView, task_spec
from methods.directsynth.search import Counterexample
from methods.directsynth.strips import Task

GOAL_COUNT = "def heuristic(state, task):\n    return task.goal_count(state)\n"
RELAXED = ("goal_count", "h_add", "h_max", "h_ff", "landmarks")
REACHABILITY = ("h_add", "h_max", "h_ff", "landmarks")  # inf exactly at relaxed dead ends
TEMPLATE = '''def heuristic(state, task):
    """state: frozenset of facts as tuples, e.g. ("on", "b1", "b2").
    task.goals, task.static (facts), task.objects (type -> names);
    features: task.goal_count(state), task.h_add(state), task.h_max(state),
    task.h_ff(state), task.landmarks(state), task.count(state, predicate),
    task.goals_left(state, predicate). Return a number (float("inf") for dead ends)."""
    return task.goal_count(state)
'''


@dataclass(frozen=True)
class Feature:
    method: str  # a TaskView feature method
    predicate: str | None = None  # its argument: a predicate, or a concept's text
    complexity: int = 1  # grammar size (concepts: constructors and primitives)

    def code(self) -> str:
        arg = f", {self.predicate!r}" if self.predicate else ""
        return f"task.{self.method}(state{arg})"

    def value(self, view: TaskView, state) -> float:
        fn = getattr(view, self.method)
        return fn(state, self.predicate) if self.predicate else fn(state)


def domain_features(task: Task) -> list[Feature]:
    """The relaxed features, then open-goal counts of goal predicates and fact counts of
    fluent predicates."""
    goal_predicates = sorted({task.atoms[i][0] for i in range(len(task.atoms))
                              if task.goal >> i & 1})
    fluent = sorted({a[0] for a in task.atoms})
    return ([Feature(name) for name in RELAXED]
            + [Feature("goals_left", p) for p in goal_predicates]
            + [Feature("count", p) for p in fluent])


class GrammarProposer:
    """Programs over the domain's features, proposed in one of two ways:

    - ``search="enumerate"``: weighted sums of up to ``max_terms`` features (weights from
      ``weights``; negative weights only on counting features, which are finite) and maxima
      of two relaxed features, smaller programs first, shuffled within a size by ``seed``;
      the next one that no counterexample so far refutes;
    - ``search="milp"``: the first program as above, then integer weights on *all* features
      (|w| <= ``max_weight``) that satisfy every counterexample so far, found by a MILP that
      minimises the weights' L1 norm (HiGHS); None when no such weights exist.

    Without feedback both modes draw the same enumeration order (the sample-and-select
    baseline's programs)."""

    def __init__(self, task: Task, max_terms: int = 3, weights=(1, 2, 3, 10, -1, -3),
                 seed: int = 0, search: str = "enumerate", max_weight: int = 10):
        if search not in ("enumerate", "milp"):
            raise UserError(f"unknown grammar search '{search}' (enumerate, milp)")
        self.search, self.max_weight = search, max_weight
        self.features = domain_features(task)
        self.view = TaskView(task_spec(task))  # features of counterexample states (trusted)
        rng = np.random.default_rng(seed)
        sums = []
        for size in range(1, max_terms + 1):
            level = []
            for combo in itertools.combinations(range(len(self.features)), size):
                for ws in itertools.product(weights, repeat=size):
                    if all(w > 0 or self.features[f].method in ("count", "goals_left")
                           for f, w in zip(combo, ws, strict=True)) and any(w > 0 for w in ws):
                        level.append(dict(zip(combo, ws, strict=True)))
            level = [level[i] for i in rng.permutation(len(level))]
            sums.extend(level)
        maxima = [(a, b) for a, b in itertools.combinations(range(len(RELAXED)), 2)]
        self.candidates = [("sum", s) for s in sums] + [("max", m) for m in maxima]
        self.next_index, self.constraints, self.feedback_seen = 0, [], 0
        self.feature_evaluations = 0  # feature vectors the proposer computed itself

    def program(self, candidate) -> str:
        kind, terms = candidate
        if kind == "max":
            body = f"max({self.features[terms[0]].code()}, {self.features[terms[1]].code()})"
        else:
            body = weighted_sum(self.features, terms)
        return f"def heuristic(state, task):\n    return {body}\n"

    def add_counterexample(self, cex: Counterexample, task: Task):
        """Feature vectors of the improving path s0..s and of the successors of s."""
        if self.view.name != task.name:
            self.view = TaskView(task_spec(task))
        path, successors = replay(cex, task)
        rows = [[f.value(self.view, task.facts(s)) for f in self.features]
                for s in [*path, *successors]]
        self.feature_evaluations += len(rows)
        matrix = np.array(rows, dtype=float)
        self.constraints.append((matrix[:len(path)], matrix[len(path):]))

    def _values(self, candidate, x: np.ndarray) -> np.ndarray:
        kind, terms = candidate
        if kind == "max":
            return np.maximum(x[..., terms[0]], x[..., terms[1]])
        idx = list(terms)
        w = np.array([terms[i] for i in idx], dtype=float)
        part = x[..., idx]
        out = (np.where(np.isinf(part), 0.0, part) * w).sum(-1)
        return np.where(np.isinf(part).any(-1), np.inf, out)

    def _fixes_all(self, candidate) -> bool:
        """No counterexample seen so far refutes the candidate: on each, either the reported
        path is not strictly improving under it (the state may leave the closure), or the
        state has a strictly improving successor."""
        for path, successors in self.constraints:
            h = self._values(candidate, path)
            if np.isfinite(h).all() and (np.diff(h) < 0).all() and not (
                    self._values(candidate, successors) < h[-1]).any():
                return False
        return True

    def _solve_weights(self) -> dict[int, int] | None:
        """Integer weights satisfying every counterexample (:func:`counterexample_options`).
        Reachability features carry weight >= 1 in total, so relaxed dead ends are inf and
        never improve; the L1 norm of the weights is minimised."""
        blocks = [counterexample_options(path, successors)
                  for path, successors in self.constraints]
        n = len(self.features)
        reach = np.array([f.method in REACHABILITY for f in self.features], dtype=float)
        low = [-self.max_weight if f.method in ("count", "goals_left") else 0
               for f in self.features]
        return solve_weights([b for b in blocks if b is not None], np.ones(n), low,
                             self.max_weight, at_least_one=reach)

    def propose(self, feedback: list, tasks: dict[str, Task]) -> str | None:
        for item in feedback[self.feedback_seen:]:
            if isinstance(item, Counterexample):  # programs of the grammar do not fail
                self.add_counterexample(item, tasks[item.task])
        self.feedback_seen = len(feedback)
        if self.search == "milp" and self.constraints:
            terms = self._solve_weights()
            return None if terms is None else self.program(("sum", terms))
        while self.next_index < len(self.candidates):
            candidate = self.candidates[self.next_index]
            self.next_index += 1
            if self._fixes_all(candidate):
                return self.program(candidate)
        return None


def weighted_sum(features: list[Feature], weights: dict[int, int]) -> str:
    """``2 * task.h_ff(state) - task.count(state, 'on')``: the code of sum(w_i * feature_i)
    ("0" when there are no terms)."""
    body = ""
    for i, w in weights.items():
        term = features[i].code()
        term = term if abs(w) == 1 else f"{abs(w)} * {term}"
        body += (term if w > 0 else f"-{term}") if not body else \
            (f" + {term}" if w > 0 else f" - {term}")
    return body or "0"


def replay(cex: Counterexample, task: Task) -> tuple[list[int], list[int]]:
    """The states of a counterexample's improving path s0..s and the successors of s."""
    path, state = [task.init], task.init
    for name in cex.path:
        state = task.operator_named(name).apply(state)
        path.append(state)
    return path, [task.operator_named(name).apply(cex.state) for name, _ in cex.successors]


def counterexample_options(path: np.ndarray, successors: np.ndarray) -> list | None:
    """The ways a weight vector w satisfies one counterexample, given the feature rows of
    its improving path s0..s and of the successors of s: some step of the path does not
    improve (``a.w >= 0``) or some successor improves (``a.w <= -1``; features are
    integers). None when the path enters a state that is a dead end for every w (an
    infinite feature), which then stops it."""
    steps = np.diff(path, axis=0)
    if not np.isfinite(steps).all():
        return None
    options = [(a, ">=0") for a in steps]
    options += [(a, "<=-1") for a in successors - path[-1] if np.isfinite(a).all()]
    return options


def solve_weights(blocks: list[list], cost: np.ndarray, low, high: int,
                  at_least_one: np.ndarray | None = None, soft: list[list] = (),
                  penalty=0.0, time_limit: float = 30.0,
                  node_limit: int | None = None) -> dict[int, int] | None:
    """Integer weights ``low <= w <= high`` minimising ``sum(cost * |w|)`` such that in each
    block at least one option ``(a, ">=0" | "<=-1")`` holds (big-M binaries, HiGHS), and
    ``at_least_one . w >= 1`` when given. Block ``i`` of ``soft`` may be violated at
    ``penalty`` (a number, or one per soft block). ``node_limit`` bounds the branch-and-bound
    nodes (deterministic, unlike ``time_limit``): the best weights found by then. None when
    no such weights exist (or none was found within the limits)."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    n = len(cost)
    blocks = [*blocks, *soft]
    k = sum(len(b) for b in blocks)
    width = 2 * n + k + len(soft)
    rows, lower, upper = [], [], []

    def row(w_part, u_part=None):
        r = np.zeros(width)
        r[:n] = w_part
        if u_part is not None:
            r[n:2 * n] = u_part
        return r

    b_index = 2 * n
    for number, options in enumerate(blocks):
        pick = np.zeros(width)
        if number >= len(blocks) - len(soft):  # its violation variable
            pick[width - len(blocks) + number] = 1
        for a, kind in options:
            big_m = high * np.abs(a).sum() + 1
            r = row(a)
            if kind == ">=0":  # a.w >= -M (1 - b)
                r[b_index] = -big_m
                lower.append(-big_m)
                upper.append(np.inf)
            else:  # a.w <= -1 + M (1 - b)
                r[b_index] = big_m
                lower.append(-np.inf)
                upper.append(big_m - 1)
            rows.append(r)
            pick[b_index] = 1
            b_index += 1
        rows.append(pick)
        lower.append(1)
        upper.append(np.inf)
    eye = np.eye(n)
    for i in range(n):  # u >= |w|
        rows += [row(-eye[i], eye[i]), row(eye[i], eye[i])]
        lower += [0, 0]
        upper += [np.inf, np.inf]
    if at_least_one is not None:
        rows.append(row(at_least_one))
        lower.append(1)
        upper.append(np.inf)
    extra = k + len(soft)
    bounds = Bounds(np.concatenate([np.asarray(low, dtype=float), np.zeros(n), np.zeros(extra)]),
                    np.concatenate([np.full(2 * n, high), np.ones(extra)]))
    objective = np.concatenate([np.zeros(n), np.asarray(cost, dtype=float), np.zeros(k),
                                np.broadcast_to(np.asarray(penalty, dtype=float),
                                                (len(soft),))])
    constraints = LinearConstraint(np.array(rows), lower, upper) if rows else ()
    result = milp(objective, constraints=constraints, integrality=np.ones(width),
                  bounds=bounds, options={"time_limit": time_limit,
                                          **({"node_limit": node_limit} if node_limit else {})})
    if result.x is None:
        return None
    weights = np.round(result.x[:n]).astype(int)
    return {i: int(w) for i, w in enumerate(weights) if w != 0}


# ---------------------------------------------------------------------------- language models
def format_counterexample(cex: Counterexample, max_items: int = 40) -> str:
    facts = " ".join("(" + " ".join(f) + ")" for f in cex.facts[:max_items])
    succ = "\n".join(f"  {name}: h = {h:g}" for name, h in cex.successors[:max_items])
    path = " ".join(cex.path) or "(the initial state)"
    return (f"Task {cex.task}: the state reached by {path} is not a goal and has h = "
            f"{cex.h:g}, but no successor has a lower value.\nState: {facts}\n"
            f"Successors:\n{succ}\nChange the heuristic so that some successor of this state "
            "has a strictly lower value, without breaking other states.")


def extract_program(reply: str) -> str | None:
    """The first fenced code block of the reply (or the reply itself) when it defines
    ``heuristic``."""
    blocks = re.findall(r"```(?:python)?\n(.*?)```", reply, flags=re.S)
    for text in [*blocks, reply]:
        if "def heuristic" in text:
            return text.strip() + "\n"
    return None


class LanguageModelProposer:
    def __init__(self, generate: Callable[[str], str], domain_text: str, example_task: str):
        self.generate, self.domain_text, self.example_task = generate, domain_text, example_task
        self.last_program: str | None = None
        self.replies_without_program = 0

    def prompt(self, feedback: list) -> str:
        text = ("Write a Python heuristic for greedy hill climbing in this PDDL domain. "
                "It must be direct: from every state reached by strictly improving moves, some "
                "successor must have a strictly lower value.\n\nDomain:\n"
                f"{self.domain_text}\n\nExample task:\n{self.example_task}\n\nTemplate:\n"
                f"```python\n{TEMPLATE}```\nAnswer with one Python code block.")
        if feedback and self.last_program:
            last = feedback[-1]
            problem = (f"It is not direct.\n{format_counterexample(last)}"
                       if isinstance(last, Counterexample) else f"It failed to run: {last}")
            text += (f"\n\nYour previous heuristic:\n```python\n{self.last_program}```\n"
                     f"{problem}")
        return text

    def propose(self, feedback: list, tasks: dict[str, Task]) -> str | None:
        reply = self.generate(self.prompt(feedback))
        program = extract_program(reply)
        if program is None:
            self.replies_without_program += 1
            program = "def heuristic(state, task):\n    raise ValueError('no program')\n"
        self.last_program = program
        return program


def transformers_generator(model, tokenizer, max_new_tokens: int, temperature: float,
                           device: str) -> Callable[[str], str]:
    """Chat-formatted sampling from a causal LM (top-p 0.95)."""
    import torch

    def generate(prompt: str) -> str:
        messages = [{"role": "user", "content": prompt}]
        if tokenizer.chat_template:
            # enable_thinking=False: Qwen3 answers without a thinking block (other templates
            # ignore the variable)
            ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                return_tensors="pt", return_dict=True,
                                                enable_thinking=False)["input_ids"]
        else:
            ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids.to(device), max_new_tokens=max_new_tokens,
                                 do_sample=temperature > 0, temperature=temperature or None,
                                 top_p=0.95, pad_token_id=tokenizer.eos_token_id)
        return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)

    return generate


def http_generator(base_url: str, model: str, max_tokens: int, temperature: float,
                   timeout: float = 120.0, api_key: str = "") -> Callable[[str], str]:
    """An OpenAI-compatible ``/chat/completions`` endpoint (vLLM, llama.cpp, Ollama, ...)."""
    url = base_url.rstrip("/") + "/chat/completions"

    def generate(prompt: str) -> str:
        body = json.dumps({"model": model, "max_tokens": max_tokens, "temperature": temperature,
                           "messages": [{"role": "user", "content": prompt}]}).encode()
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        request = urllib.request.Request(url, body, headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                text = response.read()
        except OSError as err:
            raise UserError(f"the endpoint {url} is not reachable: {err}") from err
        try:
            reply = json.loads(text)
        except ValueError:
            start = text[:60].decode(errors="replace").strip()
            raise UserError(f"{url} did not answer with JSON (it began: {start!r}); check "
                            "method.endpoint.base_url (it should end in /v1)") from None
        try:
            return reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as err:
            raise UserError(f"{url} did not answer in the chat-completions format") from err

    return generate
