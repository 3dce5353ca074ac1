"""The git gateway: the git commands forkbuild runs, through the process runner
(process.py). Every method returns data or raises GitFailed.

Identity, signing and hooks are pinned so results do not depend on the user's git
configuration; a value that comes from the user (a url, a ref, a path) never reaches git
where it could be read as an option.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shlex
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from forkbuild import process
from forkbuild.errors import ForkbuildError, GitFailed
from forkbuild.fsutil import write_atomic
from forkbuild.process import Completed

# Every git command and its output, at DEBUG: `forkbuild -v` shows them (cli configures it).
LOG = logging.getLogger("forkbuild.git")
# Output lines shown per command: `log -p` of a whole series would flood the terminal.
LOGGED_LINES = 200
ENGLISH = {"LANGUAGE": "C", "LC_ALL": "C"}  # git's messages, which forkbuild reads and shows
IDENTITY = {"user.name": "forkbuild", "user.email": "forkbuild@localhost"}
# Pinned so a user's config cannot change what forkbuild produces or let a
# hook/signing prompt interrupt it.
PINNED_CONFIG = {
    **IDENTITY,
    "commit.gpgsign": "false",
    "core.hooksPath": os.devnull,
    "core.autocrlf": "false",
    "am.threeWay": "false",
    # Keep CRs: a patch of a CRLF file carries them in its lines (git's default
    # false strips them, and such a patch then no longer applies).
    "am.keepcr": "true",
    "mailinfo.scissors": "false",  # a "-- >8 --" line in a description is text, not a cut
    "apply.whitespace": "nowarn",
    "gc.auto": "0",
}

# The flags of every patch forkbuild writes (export, import): churn-free output.
FORMAT_PATCH_FLAGS = (
    "--zero-commit",      # "From 000..." line: the commit sha changes on every re-apply
    "--full-index",       # full blob ids: `am -3` can rebuild the preimage from them
    "--no-signature",     # no "-- \n2.39.5" trailer: differs between git versions
    "--no-stat",          # the diffstat repeats the diff and churns with it
    "--keep-subject",     # no "[PATCH n/m]": numbering changes when patches are added
    "--no-numbered",
    "--no-renames",       # renames depend on similarity heuristics; plain add/delete is stable
    "--encode-email-headers",
)


# The ref `commit_changes` builds its commits on (never kept: the stream resets it at its end).
IMPORT_REF = f"refs/forkbuild/fast-import-{os.getpid()}"


class TreeEntry(NamedTuple):
    """One file as a tree or an index holds it: its mode (0o100644, 0o100755, 0o120000 a
    symlink, 0o160000 a submodule) and blob id."""

    mode: int
    blob: str


class PathChange(NamedTuple):
    """One file a `FileCommit` changes: mode 0 deletes it; otherwise its blob by id, or its bytes."""

    path: str
    mode: int
    blob: str = ""
    content: bytes | None = None


class FileCommit(NamedTuple):
    """A commit of file changes on a parent, as `Git.commit_changes` makes it (the apply engine's
    fast rung, `import --quilt`): the committer is forkbuild at the author's date, as
    `commit_tree` makes it."""

    parent: str  # a commit id; "" for the commit before it in the same batch
    author: Author
    message: str
    changes: tuple[PathChange, ...]


# commit id (or tree id) -> its files, per repository (Git.tree_entries). Bounded: quilt's
# whole-tree fallback lists a new tree per patch; the engine reads the same few again and again.
_TREES: dict[tuple[Path, str], Mapping[str, TreeEntry]] = {}
TREES_KEPT = 32
TREES_DIR = "forkbuild-trees"  # in a repository's common dir: listings Git.tree_entries keeps
OBJECT_ID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")  # SHA-1 or SHA-256: names one object forever


class KeptListing(Mapping[str, TreeEntry]):
    """A listing tree_entries kept, as its three arrays: an entry is made when it is asked
    for. A re-apply looks up the few dozen files its patches name, not all 5,771 (making
    every entry took 4-8 ms)."""

    __slots__ = ("_paths", "_modes", "_blobs", "_width", "_at")

    def __init__(self, paths: list[str], modes: list[int], blobs: str, width: int) -> None:
        self._paths, self._modes, self._blobs, self._width = paths, modes, blobs, width
        self._at = dict(zip(paths, range(len(paths)), strict=True))

    def __getitem__(self, path: str) -> TreeEntry:
        at = self._at[path]
        return TreeEntry(self._modes[at], self._blobs[at * self._width:(at + 1) * self._width])

    def __contains__(self, path: object) -> bool:
        return path in self._at

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


def _read_listing(record: Path) -> KeptListing | None:
    """A listing tree_entries kept, or None: not kept yet, or damaged (then listed again).
    Three arrays, not an object per file: read in a third of the time."""
    try:
        stored = json.loads(record.read_bytes())
        paths, modes, blobs = stored["paths"], stored["modes"], stored["blobs"]
        width = len(blobs) // len(paths) if paths else 0
        if len(modes) != len(paths) or width * len(paths) != len(blobs) or (paths and width not in (40, 64)):
            return None
        # The types of all 5,771 entries at C speed (a generator per entry took ~3 ms).
        if not set(map(type, paths)) <= {str} or not set(map(type, modes)) <= {int} or not isinstance(blobs, str):
            return None
        return KeptListing(paths, modes, blobs, width)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _listing_record(entries: Mapping[str, TreeEntry]) -> str:
    return json.dumps({"paths": list(entries), "modes": [entry.mode for entry in entries.values()],
                       "blobs": "".join(entry.blob for entry in entries.values())})


def _fast_import_path(path: str) -> str:
    """A path as fast-import reads it: C-quoted where it starts with or holds a quote or
    holds a newline; as it is otherwise (the rest of the line: spaces are fine)."""
    if not path.startswith('"') and "\n" not in path and '"' not in path:
        return path
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _ident(name: str, email: str) -> str:
    """`Name <email>` as git's own ident code writes it: no <, > or newline inside, no
    "crud" (blanks, . , : ; " ' \\) at either end."""
    crud = "".join(chr(code) for code in range(33)) + ".,:;<>\"\\'"
    clean = [re.sub(r"[<>\n]", "", part).strip(crud) for part in (name, email)]
    return f"{clean[0]} <{clean[1]}>"


def _log_output(done: Completed) -> None:
    if not LOG.isEnabledFor(logging.DEBUG):
        return  # no joining of large outputs nobody will see
    lines = [line for text in (done.stdout, done.stderr) for line in text.rstrip("\n").splitlines()]
    more = f"\n... ({len(lines) - LOGGED_LINES} more lines)" if len(lines) > LOGGED_LINES else ""
    if done.status != 0 or lines:
        LOG.debug("exit %s%s%s", done.status, "".join("\n" + line for line in lines[:LOGGED_LINES]), more)


def _revision(value: str) -> str:
    """`value` as a revision argument: refused when git would read it as an option (a command
    that takes no --end-of-options: checkout, reset, fetch's refspec)."""
    if value.startswith("-"):
        raise ForkbuildError(f"refusing to pass {value!r} to git as a revision: it starts with '-'")
    return value


def _find_git_dirs(path: Path) -> tuple[Path, Path]:
    """(git dir, common dir) of the work tree or bare repository at `path` (not its parents):
    a `.git` directory, a `.git` file naming a linked tree's git dir, or HEAD and objects/."""
    dot_git = path / ".git"
    if dot_git.is_dir():
        git_dir = dot_git
    elif dot_git.is_file():
        text = dot_git.read_text(errors="surrogateescape")
        if not text.startswith("gitdir:"):
            raise ForkbuildError(f"{path} is not a git repository ({dot_git} does not name a git dir)")
        git_dir = path / text[len("gitdir:"):].strip()
    elif (path / "HEAD").is_file() and (path / "objects").is_dir():
        git_dir = path
    else:
        raise ForkbuildError(f"{path} is not a git repository")
    git_dir = git_dir.resolve()
    commondir = git_dir / "commondir"
    common = (git_dir / commondir.read_text().strip()).resolve() if commondir.is_file() else git_dir
    return git_dir, common


class Git:
    """A repository (work tree or bare) and the git commands forkbuild runs in it."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.git_dir, self.common_dir = _find_git_dirs(self.path)

    @classmethod
    def init(cls, path: Path, *, bare: bool = False) -> Git:
        path.mkdir(parents=True, exist_ok=True)
        command = ["git", "init", "--quiet", "--initial-branch=main", *(["--bare"] if bare else [])]
        cls._result(command, process.run(command, cwd=path, env=ENGLISH), check=True)
        return cls(path)

    def run(self, *args: str, env: Mapping[str, str] | None = None, check: bool = True,
            input: str | bytes | None = None, interactive: bool = False) -> Completed:
        """Run `git <args>` with the pinned config; GitFailed unless check=False. interactive: it
        may ask on the terminal (a fetch that wants a password): not in the child group."""
        command = self._command(args)
        done = process.run(command, cwd=self.path, env={**ENGLISH, **(env or {})}, input=input, group=not interactive)
        return self._result(command, done, check=check)

    def _command(self, args: Sequence[str]) -> list[str]:
        pinned = [item for key, value in PINNED_CONFIG.items() for item in ("-c", f"{key}={value}")]
        # Logged without the pinned -c options: they are the same on every command.
        LOG.debug("$ git -C %s %s", self.path, shlex.join(args))
        return ["git", *pinned, *args]

    @staticmethod
    def _result(command: Sequence[str], done: Completed, *, check: bool) -> Completed:
        _log_output(done)
        if check and done.status != 0:
            raise GitFailed(command, done.status, done.stdout, done.stderr)
        return done

    def out(self, *args: str, env: Mapping[str, str] | None = None) -> str:
        return self.run(*args, env=env).stdout.strip()

    # -- refs and objects -------------------------------------------------
    def rev(self, ref: str) -> str | None:
        result = self.run("rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}", check=False)
        return result.stdout.strip() if result.status == 0 else None

    def update_ref(self, ref: str, commit: str) -> None:
        self.run("update-ref", "--end-of-options", ref, commit)

    def delete_ref(self, ref: str) -> None:
        self.run("update-ref", "-d", "--end-of-options", ref)

    def tagged_commit(self, name: str) -> str | None:
        """The commit the tag `name` names, or None."""
        return self.rev(f"refs/tags/{name}")

    def tag(self, name: str, commit: str) -> None:
        self.run("tag", "--no-sign", "--end-of-options", name, commit)

    def has_object(self, sha: str) -> bool:
        return self.run("cat-file", "-e", "--end-of-options", sha, check=False).status == 0

    def present_objects(self, shas: Iterable[str]) -> set[str]:
        """Those of `shas` the repository has, from one `git cat-file --batch-check`."""
        asked = sorted(set(shas))
        if not asked:
            return set()
        listing = self.run("cat-file", "--batch-check=%(objectname)", input="".join(f"{sha}\n" for sha in asked)).stdout
        return {line for line in listing.splitlines() if not line.endswith(" missing")}

    def commit_directory(self, directory: Path, *, message: str, date: str, parents: Iterable[str] = ()) -> str:
        """Commit the content of `directory` through a private index; returns the commit."""
        index = self.git_dir / f"forkbuild-import-{os.getpid()}.index"
        env = {"GIT_INDEX_FILE": str(index), "GIT_WORK_TREE": str(directory),
               "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
        try:
            self.run("add", "--all", "--force", ".", env=env)
            tree = self.out("write-tree", env=env)
        finally:
            index.unlink(missing_ok=True)
        parent_args = [arg for parent in parents for arg in ("-p", parent)]
        return self.out("commit-tree", tree, *parent_args, "-m", message, env=env)

    # -- work trees -------------------------------------------------------
    def add_worktree(self, path: Path, commit: str, *, checkout: bool = True, parallel: bool = False) -> Git:
        """A detached work tree at `commit`. checkout=False: no files and no index yet (the caller
        checks out later: `reset_hard`). parallel: one checkout worker per core."""
        self.run(*(["-c", "checkout.workers=0"] if parallel else []), "worktree", "add", "--force", "--detach",
                 *([] if checkout else ["--no-checkout"]), "--", str(path), _revision(commit))
        return Git(path)

    def remove_worktree(self, path: Path) -> None:
        """Unregister and delete a work tree of this repository (a path git does not know as one
        is left alone). Forced twice: a `worktree add` killed mid-checkout leaves its tree locked."""
        self.prune_worktrees()  # forget trees whose directory is already gone
        if Path(path).resolve() in {tree.resolve() for tree in self.worktrees()}:
            self.run("worktree", "remove", "--force", "--force", "--", str(path))

    def worktrees(self) -> list[Path]:
        """The paths of every work tree of this repository (the main one first)."""
        listing = self.out("worktree", "list", "--porcelain")
        return [Path(line.removeprefix("worktree ")) for line in listing.splitlines() if line.startswith("worktree ")]

    def prune_worktrees(self) -> None:
        self.run("worktree", "prune")

    STATUS = ("status", "--porcelain", "--untracked-files=normal")

    def status_porcelain(self) -> str:
        """Uncommitted changes (an untracked directory is one line)."""
        return self.out(*self.STATUS)

    @contextlib.contextmanager
    def status_in_background(self) -> Iterator[Callable[[], str]]:
        """`status_porcelain`, started now and read when the caller asks; waited for on the way out."""
        command = self._command(self.STATUS)
        running = process.start(command, cwd=self.path, env=ENGLISH)
        try:
            yield lambda: self._result(command, running.wait(), check=True).stdout.strip()
        finally:
            running.wait()

    def head(self) -> str:
        return self.out("rev-parse", "HEAD")

    def checkout_detached(self, commit: str) -> None:
        self.run("checkout", "--quiet", "--detach", _revision(commit))

    def reset_hard(self, commit: str) -> None:
        self.run("reset", "--quiet", "--hard", _revision(commit))

    def commits(self, base: str, head: str) -> list[str]:
        """Commits in base..head, oldest first."""
        listing = self.out("rev-list", "--reverse", "--end-of-options", f"{base}..{head}")
        return listing.split() if listing else []

    # -- patches ----------------------------------------------------------
    def am(self, patches: list[Path], *, three_way: bool, committer_date_is_author_date: bool = False) -> Completed:
        """`git am` a list of mbox patches; returns the result without raising on failure."""
        args = ["am", "--keep-non-patch", "--no-signoff"]
        if three_way:
            args.append("--3way")
        if committer_date_is_author_date:
            # Same patches, same base -> same commit ids, run after run.
            args.append("--committer-date-is-author-date")
        return self.run(*args, "--", *[str(path) for path in patches], check=False)

    def am_abort(self) -> None:
        """Stop a `git am` in progress and go back to where it started."""
        if self.am_in_progress():
            self.run("am", "--abort")

    def am_in_progress(self) -> bool:
        return (self.git_dir / "rebase-apply").exists()

    # -- questions git answers with its exit status ------------------------
    def _answer(self, *args: str) -> bool:
        """True for exit status 0, False for 1; anything else (bad patch, bad revision) raises GitFailed."""
        result = self.run(*args, check=False)
        if result.status not in (0, 1):
            raise GitFailed(["git", *args], result.status, result.stdout, result.stderr)
        return result.status == 0

    def fuzz_needed(self, patch: Path, *, on: str = "HEAD") -> int | None:
        """How many context lines a patch that fails exactly on `on` would have to ignore to
        apply (git apply -C<n>: the `fuzz` of patch(1)); None when it does not apply even so.
        Checked in a private index read from `on`: the work tree may hold conflict markers."""
        index = self.git_dir / f"forkbuild-fuzz-{os.getpid()}.index"
        env = {"GIT_INDEX_FILE": str(index)}
        try:
            self.run("read-tree", "--end-of-options", on, env=env)
            for context in (2, 1, 0):
                if self.run("apply", "--cached", "--check", f"-C{context}", "--", str(patch), env=env, check=False).status == 0:
                    return 3 - context
            return None
        finally:
            index.unlink(missing_ok=True)

    def has_staged_changes(self) -> bool:
        """Whether the index differs from HEAD."""
        return not self._answer("diff", "--cached", "--quiet", "HEAD")

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        return self._answer("merge-base", "--is-ancestor", "--end-of-options", ancestor, descendant)

    def unmerged_paths(self) -> list[str]:
        """Paths the index holds conflicting stages for (a stopped merge or `am -3`)."""
        listing = self.out("diff", "--name-only", "--diff-filter=U")
        return listing.splitlines() if listing else []

    def clean_untracked(self) -> None:
        """Delete untracked files and directories (ignored ones stay)."""
        self.run("clean", "-fdq")

    def refs(self) -> dict[str, str]:
        """Every ref of the repository: name -> object id."""
        listing = self.out("for-each-ref", "--format=%(refname) %(objectname)")
        return dict(line.split(" ", 1) for line in listing.splitlines() if line)

    def has_file(self, commit: str, path: str) -> bool:
        """Whether `commit`'s tree holds `path`; a bad commit raises GitFailed."""
        return bool(self.out("ls-tree", "--name-only", "--end-of-options", commit, "--", path))

    def show_file(self, commit: str, path: str) -> str:
        """`path`'s content at `commit`, byte for byte (not stripped); raises GitFailed when absent."""
        return self.run("cat-file", "blob", "--end-of-options", f"{commit}:{path}").stdout

    def commit_time(self, commit: str) -> int:
        """The committer date of `commit`, in seconds since the epoch."""
        return int(self.out("log", "-1", "--format=%ct", "--end-of-options", commit))

    def range_diff(self, old: str, new: str, *, creation_factor: int) -> str:
        """`git range-diff` of two commit ranges, without colour."""
        return self.out("range-diff", "--no-color", f"--creation-factor={creation_factor}", old, new)

    def apply_only(self, patch: Path, *, include: str) -> None:
        """Apply to the work tree only the part of `patch` that touches `include` (a path or glob)."""
        self.run("apply", f"--include={include}", "--", str(patch))

    def diff_tree_patch(self, commit: str) -> str:
        """The full-index patch of a single commit, as format-patch would diff it."""
        # .stdout, not out(): stripping would cut a trailing blank context line (" ") off the last hunk.
        return self.run("diff-tree", "--no-commit-id", "-p", "--full-index", "--no-renames", "--end-of-options", f"{commit}^", commit).stdout

    def format_patch(self, commit: str) -> str:
        """One commit as an mbox patch with flags fixed for churn-free export."""
        return self.run("format-patch", "--stdout", "-1", *FORMAT_PATCH_FLAGS, "--end-of-options", commit).stdout

    def changed_files(self, base: str, head: str) -> list[tuple[str, str]]:
        """(status letter, path) of every file that differs between two commits."""
        raw = self.run("diff", "--name-status", "--no-renames", "-z", "--end-of-options", base, head).stdout
        fields = [field for field in raw.split("\0") if field]
        return list(zip(fields[0::2], fields[1::2], strict=True))


    # -- export, import and the cache ------------------------------------
    def merge_commits(self, base: str, head: str) -> list[str]:
        """The merge commits in base..head (a patch series cannot hold any)."""
        listing = self.out("rev-list", "--merges", "--end-of-options", f"{base}..{head}")
        return listing.split() if listing else []

    def commit_message(self, commit: str = "HEAD") -> str:
        """The full message of `commit` (subject, body, trailers), trailing newlines stripped."""
        return self.out("log", "-1", "--format=%B", "--end-of-options", commit)

    def subject(self, commit: str = "HEAD") -> str:
        return self.out("log", "-1", "--format=%s", "--end-of-options", commit)

    def author_date(self, commit: str = "HEAD") -> str:
        """The author date of `commit` as git stores it ("<seconds> <+zone>"), for GIT_*_DATE."""
        return self.out("log", "-1", "--format=%ad", "--date=raw", "--end-of-options", commit)

    def commit(self, message: str, *, env: Mapping[str, str] | None = None, amend: bool = False) -> str:
        """Commit the index with `message` kept verbatim (blank lines, trailers); returns the new HEAD."""
        # Through a file with --cleanup=verbatim: -m would be re-wrapped and stripped.
        message_file = self.git_dir / f"FORKBUILD_COMMIT_MSG-{os.getpid()}"
        message_file.write_text(message)
        try:
            self.run("commit", "--quiet", *(["--amend"] if amend else []), "--cleanup=verbatim",
                     "-F", str(message_file), env=env)
        finally:
            message_file.unlink(missing_ok=True)
        return self.head()

    def format_patches(self, base: str, head: str) -> list[bytes]:
        """Every commit of base..head as format_patch writes it, oldest first, from one git."""
        with tempfile.TemporaryDirectory(prefix="forkbuild-format-") as scratch:
            self.run("format-patch", "--quiet", "-o", scratch, *FORMAT_PATCH_FLAGS, "--end-of-options", f"{base}..{head}")
            return [path.read_bytes() for path in sorted(Path(scratch).iterdir())]

    def fetch(self, url: str, ref: str) -> None:
        """Fetch `ref` (a commit id or a ref name) from `url`, without tags."""
        self.run("fetch", "--no-tags", "--quiet", "--", url, _revision(ref), interactive=True)

    # -- applying without a work tree (combination wheels) -------------------
    def read_tree(self, tree: str, *, index: Path) -> None:
        """Load `tree` into the private index `index` (no work tree involved)."""
        self.run("read-tree", "--end-of-options", tree, env={"GIT_INDEX_FILE": str(index)})

    def apply_cached(self, patch: Path, *, index: Path) -> str | None:
        """`git apply --cached --3way` of `patch` onto the private index: the tree, or None."""
        if self.apply_to_index(patch, index=index, three_way=True).status != 0:
            return None
        return self.write_tree(index=index)

    def apply_cached_in_order(self, patches: Iterable[Path], *, index: Path) -> str | None:
        """One strict `git apply --cached` of every patch in order into the private index, all or
        nothing: the tree, or None."""
        applied = self.apply_to_index(list(patches), index=index)
        return self.write_tree(index=index) if applied.status == 0 else None

    def changed_blobs(self, base: str, head: str) -> list[tuple[str, str, str, str]]:
        """(status letter, path, new mode, new blob id) of every file that differs (deleted: mode 000000)."""
        raw = self.run("diff-tree", "-r", "-z", "--no-renames", "--end-of-options", base, head).stdout
        fields = raw.split("\0")
        changes = []
        for header, path in zip(fields[0::2], fields[1::2], strict=False):
            if header.startswith(":"):
                _, new_mode, _, new_blob, status = header[1:].split(" ")
                changes.append((status, path, new_mode, new_blob))
        return changes

    def blob_content(self, blob: str) -> bytes:
        return self.run("cat-file", "blob", "--end-of-options", blob).stdout.encode("utf-8", "surrogateescape")

    # -- private indexes and fast-import (the apply engine, import --quilt, wheels) --
    # Patches go into a private index (no work tree); a small one holds only the files they
    # name (worktree/smallindex.py): no 5,771-entry index read and written per patch. The
    # commits of a whole run come from one fast-import.
    def apply_to_index(self, patch: Path | Sequence[Path], *, index: Path, three_way: bool = False,
                       check: bool = False, reverse: bool = False, strip: int = 1, unidiff_zero: bool = False) -> Completed:
        """`git apply --cached -v` of `patch` into the private index `index` (no work tree), strictly
        (no fuzz; offsets are fine, as for GNU patch); the result, not raised: the engine reads offsets
        and failures from its output. strip/unidiff_zero: a quilt patch's -p level and `diff -U0` hunks.
        Several patches: applied one after the other in one process, all or none."""
        patches = [patch] if isinstance(patch, Path) else list(patch)
        args = ["apply", "--cached", "-v", f"-p{strip}", *(["--unidiff-zero"] if unidiff_zero else []),
                *(["--3way"] if three_way else []), *(["--check"] if check else []),
                *(["--reverse"] if reverse else []), "--", *map(str, patches)]
        return self.run(*args, env={"GIT_INDEX_FILE": str(index)}, check=False)

    def write_tree(self, *, index: Path | None = None) -> str:
        return self.out("write-tree", env={"GIT_INDEX_FILE": str(index)} if index else None)

    def tree_entries(self, commit: str, *, keep: bool = False) -> Mapping[str, TreeEntry]:
        """path -> mode and blob id of every file of `commit`'s tree (or of a tree), from one
        `ls-tree -r`; kept a while for the process (an id names one tree forever: the path check
        and the engine's fast rung read the same base). Shared: read it, do not change it.
        keep: `commit` is an id that later runs list again (an upstream base): the listing is
        also kept in the repository (`forkbuild-trees/<id>`), which reads in a fifth of the time
        ls-tree takes for sglang's 5,771 files."""
        key = (self.common_dir, commit)
        if key not in _TREES:
            record = self.common_dir / TREES_DIR / commit if keep and OBJECT_ID.fullmatch(commit) else None
            entries: Mapping[str, TreeEntry] | None = _read_listing(record) if record else None
            if entries is None:
                listed = {}
                for item in self.run("ls-tree", "-r", "-z", "--full-tree", "--end-of-options", commit).stdout.split("\0"):
                    if item:
                        meta, path = item.split("\t", 1)
                        mode, _, blob = meta.split(" ")
                        listed[path] = TreeEntry(int(mode, 8), blob)
                if record:
                    with contextlib.suppress(OSError):  # not kept (a read-only cache): listed again next time
                        record.parent.mkdir(exist_ok=True)
                        write_atomic(record, _listing_record(listed), durable=False)
                entries = listed
            if len(_TREES) >= TREES_KEPT:
                del _TREES[next(iter(_TREES))]  # the oldest
            _TREES[key] = entries
        return _TREES[key]

    def write_index(self, index: Path, entries: Mapping[str, TreeEntry]) -> None:
        """A private index holding exactly `entries` (stage 0, no stat data: only for --cached)."""
        index.unlink(missing_ok=True)
        self.update_index(index, entries)

    def read_index(self, index: Path) -> dict[str, TreeEntry]:
        """path -> mode and blob id of every (stage 0) entry of a private index, from one `git ls-files`."""
        listing = self.run("ls-files", "--stage", "-z", env={"GIT_INDEX_FILE": str(index)}).stdout
        entries = {}
        for record in listing.split("\0"):
            if record:
                header, path = record.split("\t", 1)
                mode, blob, stage = header.split(" ")
                if stage == "0":
                    entries[path] = TreeEntry(int(mode, 8), blob)
        return entries

    def update_index(self, index: Path, changes: Mapping[str, TreeEntry | None]) -> None:
        """Set (a TreeEntry) or remove (None) entries of the private index `index`."""
        zero = "0" * 40
        lines = [f"{entry.mode:o} {entry.blob}\t{path}" if entry else f"0 {zero}\t{path}"
                 for path, entry in changes.items()]
        self.run("update-index", "-z", "--index-info", env={"GIT_INDEX_FILE": str(index)},
                 input="".join(line + "\0" for line in lines))

    def commit_changes(self, commits: Sequence[FileCommit], *, date_format: str = "rfc2822") -> list[str]:
        """The commits, each of its changes on its parent's tree, from one `git fast-import`; their
        ids in order. The same author, date, message and tree give the id `commit_tree` gives.
        date_format: how fast-import reads the dates, "rfc2822" (git's own date parser, as
        commit_tree's GIT_AUTHOR_DATE: takes "<seconds> <+zone>" too, from 1973 on) or "raw"
        (only "<seconds> <+zone>", any seconds: a patch file's mtime may be 0)."""
        if not commits:
            return []
        stream = bytearray()
        for number, commit in enumerate(commits, start=1):
            author, message = commit.author, commit.message.encode("utf-8", "surrogateescape")
            parent = commit.parent or f":{number - 1}"
            stream += (f"commit {IMPORT_REF}\nmark :{number}\n"
                       f"author {_ident(author.name, author.email)} {author.date}\n"
                       f"committer {_ident(IDENTITY['user.name'], IDENTITY['user.email'])} {author.date}\n"
                       f"data {len(message)}\n").encode("utf-8", "surrogateescape") + message
            stream += f"\nfrom {parent}\n".encode()
            for change in commit.changes:
                path = _fast_import_path(change.path)
                if not change.mode:
                    stream += f"D {path}\n".encode("utf-8", "surrogateescape")
                elif change.content is not None:
                    stream += f"M {change.mode:o} inline {path}\ndata {len(change.content)}\n".encode(
                        "utf-8", "surrogateescape") + change.content + b"\n"
                else:
                    stream += f"M {change.mode:o} {change.blob} {path}\n".encode("utf-8", "surrogateescape")
            stream += b"\n"
        stream += f"reset {IMPORT_REF}\n".encode()  # the ids are returned: no ref is kept (nor made)
        # Each commit's id comes back on stdout, one line per `get-mark`, in order.
        stream += "".join(f"get-mark :{number}\n" for number in range(1, len(commits) + 1)).encode()
        return self.run("fast-import", "--quiet", "--force", f"--date-format={date_format}", input=bytes(stream)).stdout.split()

    def tree_of(self, commit: str) -> str:
        return self.out("rev-parse", "--verify", "--end-of-options", f"{commit}^{{tree}}")

    def commit_tree(self, tree: str, *, parents: Iterable[str], message: str, author: Author) -> str:
        """A commit of `tree` with `author` (also the committer date: same input, same id)."""
        env = {"GIT_AUTHOR_NAME": author.name, "GIT_AUTHOR_EMAIL": author.email,
               "GIT_AUTHOR_DATE": author.date, "GIT_COMMITTER_DATE": author.date}
        parent_args = [arg for parent in parents for arg in ("-p", parent)]
        message_file = self.git_dir / f"FORKBUILD_COMMIT_TREE_MSG-{os.getpid()}"
        message_file.write_text(message, encoding="utf-8", errors="surrogateescape")
        try:
            return self.out("commit-tree", tree, *parent_args, "-F", str(message_file), env=env)
        finally:
            message_file.unlink(missing_ok=True)

    def author_of(self, commit: str) -> Author:
        name, email, date = self.out("log", "-1", "--format=%an%x00%ae%x00%ad", "--date=raw", "--end-of-options", commit).split("\0")
        return Author(name=name, email=email, date=date)

    def raw_message(self, commit: str) -> str:
        """The message of `commit` byte for byte (commit-tree stores it unchanged)."""
        raw = self.run("cat-file", "commit", "--end-of-options", commit).stdout
        return raw.split("\n\n", 1)[1] if "\n\n" in raw else ""

    def merge_tree(self, ours: str, theirs: str) -> Completed:
        """`git merge-tree --write-tree`: the tree on stdout's first line; exit 1: conflicts. Not raised."""
        return self.run("merge-tree", "--write-tree", "--name-only", "--messages", "--end-of-options", ours, theirs, check=False)

    def cherry_pick_no_commit(self, commit: str) -> Completed:
        """Merge `commit`'s change into the work tree and index (conflicts stay). Not raised."""
        return self.run("cherry-pick", "--no-commit", "--allow-empty", "--end-of-options", commit, check=False)

    def sequencer_quit(self) -> None:
        """Forget a stopped cherry-pick's state (its changes stay in the work tree)."""
        if (self.git_dir / "CHERRY_PICK_HEAD").exists() or (self.git_dir / "sequencer").exists():
            self.run("cherry-pick", "--quit", check=False)
            (self.git_dir / "CHERRY_PICK_HEAD").unlink(missing_ok=True)

    def apply_worktree(self, patch: Path, *, three_way: bool = False, reject: bool = False) -> Completed:
        """`git apply --index` (or --3way, or --reject) in the work tree. Not raised."""
        mode = ["--3way"] if three_way else ["--index", "--reject"] if reject else ["--index"]
        return self.run("apply", "-v", *mode, "--", str(patch), check=False)

    def set_head(self, commit: str) -> None:
        """Point the detached HEAD at `commit`, leaving index and work tree as they are."""
        self.run("update-ref", "--no-deref", "--end-of-options", "HEAD", commit)

    def untracked(self, pattern: str) -> list[str]:
        """Untracked (not ignored) files matching the pathspec `pattern`."""
        listing = self.out("ls-files", "--others", "--exclude-standard", "--", pattern)
        return listing.splitlines() if listing else []

    def diff_between(self, old: str, new: str, paths: Iterable[str]) -> str:
        """The diff of `paths` from commit `old` to `new` (what upstream changed there)."""
        return self.run("diff", "--no-color", "--no-renames", "--end-of-options", old, new, "--", *paths).stdout


class Author(NamedTuple):
    """Who wrote a patch and when, as git's environment takes them (date: raw or RFC 2822)."""

    name: str
    email: str
    date: str

