"""bench/wo_a_w8_gluon.py's ping-pong kernel (wo_a_w8_gluon_pp_kernel, COOP off): its mbarrier protocol simulated
on a CPU, with and without the order barrier between the two consumers' main loops.

An mbarrier wait by parity returns once the barrier's completed-phase count has the other parity, so a waiter
that is two phases ahead takes the phase before for its own. The simulation runs the producer, the two consumers
and the TMA completions (in any order) in random interleavings and checks that each consumer's ready wait
returns only once its own step's data is in the stage, and that nothing deadlocks.

    python3 bench/sim_wo_a_w8_pp_barriers.py    # 2026-12-02: without order 1115 deadlocks and 1195 wrong-data
                                                # runs of 1800; with it none
"""

from __future__ import annotations

import random

CASES = ((16, 4, 5), (8, 6, 4), (16, 8, 3), (4, 6, 7), (16, 4, 1), (8, 4, 2))  # (K steps, stages, tiles per program)
SEEDS = 300


class Barrier:
    def __init__(self, count):
        self.count, self.pending, self.completed = count, count, 0

    def arrive(self):
        self.pending -= 1
        if self.pending == 0:
            self.completed += 1
            self.pending = self.count

    def passes(self, parity):  # mbarrier.try_wait.parity
        return (self.completed & 1) != parity


def simulate(k_steps, stages, tiles, with_order, seed):
    """'ok' or 'deadlock', and the wrong reads seen."""
    rnd = random.Random(seed)
    ready = [Barrier(1) for _ in range(stages)]
    empty = [Barrier(1) for _ in range(stages)]
    order = [Barrier(1), Barrier(1)]
    stage_holds = [None] * stages
    in_flight = []  # (stage, step) TMA loads issued, not landed
    wrong = []

    def producer():
        for n in range(tiles * k_steps):
            s = n % stages
            yield lambda s=s, n=n: empty[s].passes(((n // stages) & 1) ^ 1)
            in_flight.append((s, n))

    def consumer(c):
        base = c * k_steps
        for m, _ in enumerate(range(c, tiles, 2)):
            if with_order and c == 0 and m > 0:
                yield lambda m=m: order[1].passes((m - 1) & 1)
            if with_order and c == 1:
                yield lambda m=m: order[0].passes(m & 1)
            for i in range(k_steps):
                n = base + i
                s = n % stages
                yield lambda s=s, n=n: ready[s].passes((n // stages) & 1)
                if stage_holds[s] != n:
                    wrong.append((c, n, stage_holds[s]))
                if i > 0:
                    yield lambda: True  # the wgmma wait: any interleaving
                    empty[(n - 1) % stages].arrive()
            empty[(base + k_steps - 1) % stages].arrive()
            if with_order:
                order[c].arrive()
            base += 2 * k_steps

    procs = {"producer": producer(), "consumer 0": consumer(0), "consumer 1": consumer(1)}
    waits = {name: cond for name, proc in procs.items() if (cond := next(proc, None)) is not None}
    while waits or in_flight:
        choices = [name for name, cond in waits.items() if cond()] + (["tma"] if in_flight else [])
        if not choices:
            return "deadlock", wrong
        pick = rnd.choice(choices)
        if pick == "tma":
            s, n = in_flight.pop(rnd.randrange(len(in_flight)))
            stage_holds[s] = n
            ready[s].arrive()
            continue
        cond = next(procs[pick], None)
        if cond is None:
            del waits[pick]
        else:
            waits[pick] = cond
    return "ok", wrong


def main():
    for with_order in (False, True):
        deadlocks = wrong_runs = 0
        for seed in range(SEEDS):
            for case in CASES:
                state, wrong = simulate(*case, with_order, seed)
                deadlocks += state == "deadlock"
                wrong_runs += bool(wrong)
        print(f"order barrier {'on' if with_order else 'off'}: deadlocks {deadlocks}, wrong-data runs {wrong_runs} "
              f"of {SEEDS * len(CASES)}")


if __name__ == "__main__":
    main()
