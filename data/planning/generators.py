"""Seeded generators of PDDL tasks for the IPC 2023 learning-track domains, at sizes beyond
the shipped training and easy test tasks.

Each generator takes a size ``n`` (the domain's main object count: blocks, passengers, cars,
nuts, children, images, packages, floor rows) and a ``random.Random`` and returns problem
text for the shipped domain file. The parameters follow the IPC 2023 generators' ratios (the
comments at the top of the shipped tasks). Rovers and sokoban have no generator here (their
tasks need connectivity and solvability checks); their larger tasks are the largest shipped
easy test tasks (:func:`larger_tasks`).
"""

from __future__ import annotations

import random
from pathlib import Path


def _problem(domain: str, name: str, objects: dict[str, list[str]], init: list[str],
             goal: list[str]) -> str:
    objs = "\n".join(f"  {' '.join(names)} - {kind}" for kind, names in objects.items() if names)
    return (f"(define (problem {name})\n (:domain {domain})\n (:objects\n{objs}\n )\n"
            f" (:init\n  " + "\n  ".join(init) + "\n )\n (:goal (and\n  "
            + "\n  ".join(goal) + "\n )))\n")


def _towers(blocks: list[str], rng: random.Random) -> list[list[str]]:
    order = blocks[:]
    rng.shuffle(order)
    towers: list[list[str]] = []
    for b in order:
        if towers and rng.random() < 0.7:
            rng.choice(towers).append(b)
        else:
            towers.append([b])
    return towers


def _tower_facts(towers: list[list[str]]) -> list[str]:
    facts = []
    for tower in towers:
        facts.append(f"(on-table {tower[0]})")
        facts += [f"(on {a} {b})" for b, a in zip(tower, tower[1:], strict=False)]
        facts.append(f"(clear {tower[-1]})")
    return facts


def blocksworld(n: int, rng: random.Random) -> str:
    blocks = [f"b{i}" for i in range(1, n + 1)]
    init = ["(arm-empty)", *_tower_facts(_towers(blocks, rng))]
    return _problem("blocksworld", f"blocksworld-{n}", {"object": blocks}, init,
                    _tower_facts(_towers(blocks, rng)))


def miconic(n: int, rng: random.Random) -> str:
    floors = [f"f{i}" for i in range(1, 2 * n + 1)]
    people = [f"p{i}" for i in range(1, n + 1)]
    init = [f"(lift-at {floors[0]})"]
    for p in people:
        a, b = rng.sample(floors, 2)
        init += [f"(origin {p} {a})", f"(destin {p} {b})"]
    init += [f"(above {a} {b})" for i, a in enumerate(floors) for b in floors[i + 1:]]
    return _problem("miconic", f"miconic-{n}", {"passenger": people, "floor": floors}, init,
                    [f"(served {p})" for p in people])


def ferry(n: int, rng: random.Random) -> str:
    cars = [f"car{i}" for i in range(1, n + 1)]
    locations = [f"loc{i}" for i in range(1, max(3, n * 3 // 4) + 1)]
    init = ["(empty-ferry)", f"(at-ferry {rng.choice(locations)})"]
    goal = []
    for c in cars:
        a, b = rng.sample(locations, 2)
        init.append(f"(at {c} {a})")
        goal.append(f"(at {c} {b})")
    return _problem("ferry", f"ferry-{n}", {"car": cars, "location": locations}, init, goal)


def spanner(n: int, rng: random.Random) -> str:
    nuts = [f"nut{i}" for i in range(1, n + 1)]
    spanners = [f"spanner{i}" for i in range(1, 2 * n + 1)]
    path = [f"location{i}" for i in range(1, 2 * n + 1)]
    init = ["(at bob shed)", f"(link shed {path[0]})", f"(link {path[-1]} gate)"]
    init += [f"(link {a} {b})" for a, b in zip(path, path[1:], strict=False)]
    for s in spanners:
        init += [f"(at {s} {rng.choice(path)})", f"(usable {s})"]
    for nut in nuts:
        init += [f"(at {nut} gate)", f"(loose {nut})"]
    return _problem("spanner", f"spanner-{n}",
                    {"man": ["bob"], "spanner": spanners, "nut": nuts,
                     "location": ["shed", *path, "gate"]},
                    init, [f"(tightened {nut})" for nut in nuts])


def childsnack(n: int, rng: random.Random) -> str:
    children = [f"child{i}" for i in range(1, n + 1)]
    trays = [f"tray{i}" for i in range(1, max(1, n // 4) + 1)]
    sandwiches = [f"sandw{i}" for i in range(1, n + n // 2 + 1)]
    bread = [f"bread{i}" for i in range(1, n + 1)]
    content = [f"content{i}" for i in range(1, n + 1)]
    tables = ["table1", "table2", "table3"]
    allergic = set(rng.sample(children, n * 6 // 10))
    gluten_free = rng.sample(range(n), len(allergic))
    init = [f"(at {t} kitchen)" for t in trays]
    init += [f"(at_kitchen_bread {b})" for b in bread]
    init += [f"(at_kitchen_content {c})" for c in content]
    init += [f"(no_gluten_bread {bread[i]})" for i in gluten_free]
    init += [f"(no_gluten_content {content[i]})" for i in gluten_free]
    for c in children:
        init.append(f"({'allergic_gluten' if c in allergic else 'not_allergic_gluten'} {c})")
        init.append(f"(waiting {c} {rng.choice(tables)})")
    init += [f"(notexist {s})" for s in sandwiches]
    return _problem("childsnack", f"childsnack-{n}",
                    {"child": children, "tray": trays, "sandwich": sandwiches,
                     "bread-portion": bread, "content-portion": content, "place": tables},
                    init, [f"(served {c})" for c in children])


def satellite(n: int, rng: random.Random) -> str:
    sats = [f"sat{i}" for i in range(1, max(2, n // 2) + 1)]
    instruments = [f"ins{i}" for i in range(1, 2 * len(sats) + 1)]
    modes = [f"mod{i}" for i in range(1, 4)]
    directions = [f"dir{i}" for i in range(1, n + 1)]
    init = []
    for s in sats:
        init += [f"(pointing {s} {rng.choice(directions)})", f"(power_avail {s})"]
    supported = set()
    for i, ins in enumerate(instruments):
        init.append(f"(on_board {ins} {sats[i % len(sats)]})")
        for m in rng.sample(modes, rng.randint(1, 2)):
            init.append(f"(supports {ins} {m})")
            supported.add(m)
        init.append(f"(calibration_target {ins} {rng.choice(directions)})")
    images = rng.sample([(d, m) for d in directions for m in sorted(supported)], n)
    goal = [f"(have_image {d} {m})" for d, m in images]
    goal += [f"(pointing {s} {rng.choice(directions)})" for s in rng.sample(sats, len(sats) // 2)]
    return _problem("satellite", f"satellite-{n}",
                    {"satellite": sats, "instrument": instruments, "mode": modes,
                     "direction": directions}, init, goal)


def transport(n: int, rng: random.Random) -> str:
    locations = [f"l{i}" for i in range(1, n + 1)]
    vehicles = [f"v{i}" for i in range(1, max(2, n // 3) + 1)]
    packages = [f"p{i}" for i in range(1, n + 1)]
    sizes = ["c0", "c1", "c2"]
    roads = set()
    for i in range(1, n):  # a random tree, then a few shortcuts
        j = rng.randrange(i)
        roads |= {(locations[i], locations[j]), (locations[j], locations[i])}
    for _ in range(n // 3):
        a, b = rng.sample(locations, 2)
        roads |= {(a, b), (b, a)}
    init = [f"(road {a} {b})" for a, b in sorted(roads)]
    init += ["(capacity-predecessor c0 c1)", "(capacity-predecessor c1 c2)"]
    for v in vehicles:
        init += [f"(at {v} {rng.choice(locations)})", f"(capacity {v} {rng.choice(sizes[1:])})"]
    goal = []
    for p in packages:
        a, b = rng.sample(locations, 2)
        init.append(f"(at {p} {a})")
        goal.append(f"(at {p} {b})")
    return _problem("transport", f"transport-{n}",
                    {"vehicle": vehicles, "package": packages, "location": locations,
                     "size": sizes}, init, goal)


def floortile(n: int, rng: random.Random) -> str:
    """``n`` rows to paint (a checkerboard) of ``n`` columns, row 0 unpainted, two robots."""
    rows, cols = n + 1, n
    tiles = [f"tile_{r}_{c}" for r in range(rows) for c in range(1, cols + 1)]
    robots = ["robot1", "robot2"]
    spots = rng.sample(tiles, len(robots))
    init = ["(available-color white)", "(available-color black)"]
    for robot, tile in zip(robots, spots, strict=True):
        init += [f"(robot-at {robot} {tile})",
                 f"(robot-has {robot} {rng.choice(['white', 'black'])})"]
    init += [f"(clear {t})" for t in tiles if t not in spots]
    for r in range(rows):
        for c in range(1, cols + 1):
            if r + 1 < rows:
                init += [f"(up tile_{r + 1}_{c} tile_{r}_{c})",
                         f"(down tile_{r}_{c} tile_{r + 1}_{c})"]
            if c + 1 <= cols:
                init += [f"(right tile_{r}_{c + 1} tile_{r}_{c})",
                         f"(left tile_{r}_{c} tile_{r}_{c + 1})"]
    goal = [f"(painted tile_{r}_{c} {'white' if (r + c) % 2 == 0 else 'black'})"
            for r in range(1, rows) for c in range(1, cols + 1)]
    return _problem("floortile", f"floortile-{n}",
                    {"tile": tiles, "robot": robots, "color": ["white", "black"]}, init, goal)


GENERATORS = {"blocksworld": blocksworld, "childsnack": childsnack, "ferry": ferry,
              "floortile": floortile, "miconic": miconic, "satellite": satellite,
              "spanner": spanner, "transport": transport}
# sizes of the larger test tasks: beyond every shipped training task the default run uses
# (p01-p10) and its easy test tasks (p01-p05)
LARGER_SIZES = {"blocksworld": (10, 12, 15), "childsnack": (5, 6, 7), "ferry": (8, 10, 12),
                "floortile": (4, 4, 5), "miconic": (8, 10, 12), "satellite": (8, 10, 12),
                "spanner": (4, 5, 6), "transport": (8, 10, 12)}
SHIPPED_LARGER = ("p28.pddl", "p29.pddl", "p30.pddl")  # rovers and sokoban


def generate(domain: str, sizes, seed: int, folder: Path) -> list[Path]:
    """Write one task per size to ``folder`` (seeded by the seed, domain and position)."""
    if domain not in GENERATORS:
        raise KeyError(domain)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for k, n in enumerate(sizes):
        rng = random.Random(f"{domain}-{seed}-{k}-{n}")
        path = folder / f"{domain}-n{n}-s{seed}-{k}.pddl"
        path.write_text(GENERATORS[domain](n, rng))
        out.append(path)
    return out
