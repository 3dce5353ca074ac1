"""The one sequencer: patch jobs applied in order by the engine, stopping at a conflict for a
person, and going on from that stop: continue_ (the person's resolution becomes the job's commit),
skip (the job left out) or abort (the tree back where the run started). `apply --all` and `rebase`
are its two uses: each keeps the cursor in its own state record (statefile), saves it where
`took` is called, and says what a conflict means (apply: a stop; rebase: the porter, then a stop).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from forkbuild.errors import ApplyError, quoted
from forkbuild.worktree.engine import Engine, Outcome, PatchJob, PatchResult, patch_author_message

# What to do with each job's result, at its index: recorded (and saved) by the use; at a conflict it
# raises to stop there, or returns what became of the job.
Took = Callable[[int, PatchResult], PatchResult]
# A result decided without applying (rebase: a patch whose header says upstream has it); None: apply it.
Decide = Callable[[int], PatchResult | None]


class Sequencer:
    """`jobs` onto `engine`'s head. one_by_one: each job its own engine run (a use that saves its
    state between jobs); otherwise as many at a time as the engine's fast rung takes. stop=False: a
    conflict is a result like any other (apply of a variant reports it), never left in the tree."""

    def __init__(self, engine: Engine, jobs: Sequence[PatchJob], *, one_by_one: bool = False, stop: bool = True) -> None:
        self.engine, self.jobs, self.one_by_one, self.stop = engine, tuple(jobs), one_by_one, stop

    def run(self, cursor: int, *, took: Took, decide: Decide | None = None) -> list[PatchResult]:
        """jobs[cursor:], in order, up to the first conflict `took` stops at; the commits stay pending
        (the engine's `finish` writes and checks them out)."""
        results: list[PatchResult] = []
        at = cursor
        while at < len(self.jobs):
            decided = decide(at) if decide else None
            batch = [decided] if decided is not None else \
                self.engine.run(self.jobs[at:at + 1] if self.one_by_one else self.jobs[at:], stop=self.stop, write=False)
            for result in batch:
                results.append(took(at, result))
                at += 1
        return results

    def continue_(self, cursor: int) -> PatchResult:
        """The person's resolution of the job stopped at `cursor` becomes its commit (or EMPTIED)."""
        job, git = self.jobs[cursor], self.engine.worktree
        unmerged = git.unmerged_paths()
        if unmerged:
            raise ApplyError(f"{job.name}: still unmerged: {', '.join(unmerged)}", hint=f"resolve the conflict "
                             f"markers in {git.path}, `git add` the files, then --continue")
        # Untracked files count: they would stay behind in the tree, outside every patch.
        leftovers = tuple(git.untracked("*.rej")) + tuple(line[3:] for line in git.status_porcelain().splitlines()
                                           if line[1:2] not in (" ", "") and not line.endswith(".rej"))
        if leftovers:
            raise ApplyError(f"{job.name}: the work tree has changes that are not staged (or .rej files): "
                             f"{', '.join(leftovers)}", hint=f"`git -C {quoted(git.path)} add` what belongs to the "
                             "patch and remove the rest (the .rej files too, once their hunks are in), then --continue")
        head = self.engine.head
        made = git.commits(head, git.head())
        if len(made) > 1:
            raise ApplyError(f"{job.name}: {len(made)} commits were made for one patch",
                             hint=f"squash them into one (git -C {quoted(git.path)} reset --soft {head[:12]} "
                                  "&& git commit), then --continue")
        git.sequencer_quit()
        if made:
            commit = made[0]
        elif git.staged():
            author, message = git.authored(job.source) if job.source \
                else patch_author_message(self.engine.read(job.path))
            commit = git.commit_tree(git.write_tree(), parents=[head], message=message, author=author)
            git.move_head(commit)  # index and work tree stay
        else:
            git.reset_hard(head)
            return PatchResult(name=job.name, outcome=Outcome.EMPTIED,
                               detail="the resolution kept the base's side: nothing of the patch is left")
        self.engine.adopt(commit)
        return PatchResult(name=job.name, outcome=Outcome.RESOLVED, commit=commit, detail="conflict resolved by hand")

    def skip(self, cursor: int) -> PatchResult:
        """Leave the job stopped at `cursor` out: the work tree goes back to the engine's head."""
        git, head = self.engine.worktree, self.engine.head
        git.sequencer_quit()
        git.reset_hard(head)
        git.clean_untracked()
        self.engine.adopt(head)
        return PatchResult(name=self.jobs[cursor].name, outcome=Outcome.SKIPPED,
                           detail="left out with --skip at a conflict")

    def abort(self, cursor: int, *, back_to: str) -> None:
        """The stop at `cursor` left, and the work tree back at `back_to` (where the run started)."""
        self.skip(cursor)
        self.engine.worktree.reset_hard(back_to)
