"""The git gateway, on the process runner (process.py): every method returns data or raises
GitFailed. forkbuild's git is forkbuild's: no system or global (XDG) config or attributes, none of
the environment variables that change git's output or identity, and the settings that shape what
it writes or could run a program pinned on the command line (over a repository's own config, a
foreign one's too); a user's value never reaches git where it could be an option."""

from __future__ import annotations

import logging
import os
import re
import shlex
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from forkbuild.errors import ForkbuildError, GitFailed, git_disk_error
from forkbuild.io import process
from forkbuild.io.process import Completed

LOG = logging.getLogger("forkbuild.io.git")  # every command and its output, at DEBUG (-v)
LOGGED_LINES = 200  # per command: `log -p` of a whole series would flood the terminal
ENGLISH = {"LANGUAGE": "C", "LC_ALL": "C"}  # git's messages, which forkbuild reads and shows
IDENTITY = {"user.name": "forkbuild", "user.email": "forkbuild@localhost"}
EMPTY_BLOB = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"  # the blob of an empty file
# A user's config must not change what forkbuild produces, nor a hook or signing prompt stop it,
# nor a repository's config (an imported contributor's included) run a program of its choosing.
PINNED_CONFIG = {
    **IDENTITY,
    "commit.gpgsign": "false",
    "core.hooksPath": os.devnull,
    "core.autocrlf": "false",
    "am.threeWay": "false",
    "am.keepcr": "true",  # a patch of a CRLF file carries CRs in its lines
    "mailinfo.scissors": "false",  # a "-- >8 --" line in a description is text, not a cut
    "apply.whitespace": "nowarn",
    "gc.auto": "0",
    # programs: an fsmonitor, a signature check's gpg, a pager
    "core.fsmonitor": "false",
    "core.untrackedCache": "false",
    "log.showSignature": "false",
    "core.pager": "cat",
    "core.attributesFile": os.devnull,  # the XDG attributes file (`* -diff` there made every patch binary)
    "rerere.enabled": "false",  # a recorded resolution must not settle a rebase's conflict unseen
    # the bytes of every patch and listing forkbuild writes or reads
    "diff.noprefix": "false",
    "diff.mnemonicPrefix": "false",
    "diff.relative": "false",
    "diff.context": "3",
    "diff.interHunkContext": "0",
    "diff.algorithm": "myers",
    "diff.indentHeuristic": "true",
    "diff.suppressBlankEmpty": "false",
    "core.quotePath": "true",
    "i18n.logOutputEncoding": "UTF-8",
    "i18n.commitEncoding": "UTF-8",
    "format.signOff": "false",
    "format.thread": "false",
    "format.coverLetter": "false",
    "format.numbered": "false",
    "format.signature": "",
    "color.ui": "false",
}
# No system, global or XDG config or attributes for forkbuild's git (its own repositories have
# only what forkbuild writes; a fetch keeps the user's, for credentials and ssh).
ISOLATED_ENV: dict[str, str | None] = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
                                       "GIT_ATTR_NOSYSTEM": "1"}
# The environment that changes git's output, identity, object format or what it runs: not inherited
# (forkbuild sets an author or committer date itself where it means one).
DROPPED_ENV: dict[str, str | None] = dict.fromkeys((
    "GIT_DIFF_OPTS", "GIT_EXTERNAL_DIFF", "GIT_PAGER", "GIT_ICASE_PATHSPECS", "GIT_GLOB_PATHSPECS",
    "GIT_NOGLOB_PATHSPECS", "GIT_LITERAL_PATHSPECS", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE", "GIT_DEFAULT_HASH", "GIT_TEMPLATE_DIR",
    "GIT_EXEC_PATH", "GIT_SSL_NO_VERIFY"))
# In every repository forkbuild makes: its attributes beat a tree's .gitattributes (a patch adding
# `*.py -diff` turned every export binary): binary-ness is git's own guess, no filter or driver.
INFO_ATTRIBUTES = "* !diff !merge !filter !text !eol !working-tree-encoding !export-subst !ident\n"
PINNED_ARGS = tuple(item for key, value in PINNED_CONFIG.items() for item in ("-c", f"{key}={value}"))

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

IMPORT_REF = f"refs/forkbuild/fast-import-{os.getpid()}"


class TreeEntry(NamedTuple):
    """One file of a tree or an index: its mode (0o120000 a symlink, 0o160000 a gitlink) and blob."""

    mode: int
    blob: str


class PathChange(NamedTuple):
    """One file a `FileCommit` changes: mode 0 deletes it; otherwise its blob by id, or its bytes."""

    path: str
    mode: int
    blob: str = ""
    content: bytes | None = None


class FileCommit(NamedTuple):
    """A commit of file changes on a parent, for `Git.commit_changes`."""

    parent: str  # a commit id; "" for the commit before it in the same batch
    author: Author
    message: str
    changes: tuple[PathChange, ...]




def _fast_import_path(path: str) -> str:
    """A path as fast-import reads it: C-quoted if it holds a quote or a newline."""
    if '"' not in path and "\n" not in path:
        return path
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _ident(name: str, email: str) -> str:
    """`Name <email>` as git writes it: no <, > or newline inside, no "crud" at either end."""
    crud = "".join(chr(code) for code in range(33)) + ".,:;<>\"\\'"
    clean = [re.sub(r"[<>\n]", "", part).strip(crud) for part in (name, email)]
    return f"{clean[0]} <{clean[1]}>"


def _run(command: list[str], *, cwd: Path, env: Mapping[str, str] | None = None, check: bool = True,
         input: str | bytes | None = None, group: bool = True, isolated: bool = True) -> Completed:
    base = {**DROPPED_ENV, **(ISOLATED_ENV if isolated else {}), **ENGLISH}
    done = process.run(command, cwd=cwd, env={**base, **(env or {})}, input=input, group=group)
    if LOG.isEnabledFor(logging.DEBUG):
        lines = [line for text in (done.stdout, done.stderr) for line in text.rstrip("\n").splitlines()]
        more = f"\n... ({len(lines) - LOGGED_LINES} more lines)" if len(lines) > LOGGED_LINES else ""
        if done.status != 0 or lines:
            LOG.debug("exit %s%s%s", done.status, "".join("\n" + line for line in lines[:LOGGED_LINES]), more)
    if check and done.status != 0:
        shown = command[:1] + command[1 + len(PINNED_ARGS):] if tuple(command[1:1 + len(PINNED_ARGS)]) == PINNED_ARGS \
            else command  # the command as the person would type it: the pinned config is forkbuild's every time
        raise git_disk_error(done.status, done.stderr, cwd) or GitFailed(shown, done.status, done.stdout, done.stderr)
    return done


def _revision(value: str) -> str:
    """`value` for a git command without --end-of-options; refused if git would read an option."""
    if value.startswith("-"):
        raise ForkbuildError(f"refusing to pass {value!r} to git as a revision: it starts with '-'")
    return value


def _file_patterns(paths: Iterable[str]) -> str:
    """sparse-checkout patterns of exactly these files: anchored, every wildcard escaped."""
    return "".join("/" + re.sub(r"([\\*?\[!#])", r"\\\1", name) + "\n" for name in paths)


def _find_git_dir(path: Path) -> Path:
    """The git dir of the work tree or bare repository at `path` (not its parents)."""
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
    return git_dir.resolve()


class Git:
    """A repository (work tree or bare) and the git commands forkbuild runs in it."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.git_dir = _find_git_dir(self.path)

    @classmethod
    def init(cls, path: Path, *, bare: bool = False) -> Git:
        path.mkdir(parents=True, exist_ok=True)
        # --template=: no hooks or files from a template directory; sha1 whatever GIT_DEFAULT_HASH says
        _run(["git", "init", "--quiet", "--template=", "--object-format=sha1", "--initial-branch=main",
              *(["--bare"] if bare else [])], cwd=path)
        repo = cls(path)
        repo.own_attributes()
        return repo

    def own_attributes(self) -> None:
        """INFO_ATTRIBUTES in the repository's (common) info/attributes, written where it differs."""
        common = self.git_dir / "commondir"
        root = (self.git_dir / common.read_text().strip()).resolve() if common.is_file() else self.git_dir
        path = root / "info" / "attributes"
        if not path.is_file() or path.read_text() != INFO_ATTRIBUTES:
            path.parent.mkdir(exist_ok=True)
            path.write_text(INFO_ATTRIBUTES)

    def run(self, *args: str, env: Mapping[str, str] | None = None, check: bool = True,
            input: str | bytes | None = None, interactive: bool = False) -> Completed:
        """`git <args>`; GitFailed unless check=False. interactive: may ask on the terminal (not grouped)
        and reads the user's global config (a fetch's credentials, proxies and ssh)."""
        LOG.debug("$ git -C %s %s", self.path, shlex.join(args))  # without the pinned config
        return _run(["git", *PINNED_ARGS, *args], cwd=self.path, env=env, check=check, input=input,
                    group=not interactive, isolated=not interactive)

    def out(self, *args: str, env: Mapping[str, str] | None = None) -> str:
        return self.run(*args, env=env).stdout.strip()

    def rev(self, ref: str) -> str | None:
        result = self.run("rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}", check=False)
        return result.stdout.strip() if result.status == 0 else None

    def update_ref(self, ref: str, commit: str) -> None:
        self.run("update-ref", "--end-of-options", ref, commit)

    def move_head(self, commit: str) -> None:
        """HEAD (detached) at `commit`; the index and the work tree stay as they are."""
        self.run("update-ref", "--no-deref", "--end-of-options", "HEAD", commit)

    def ref_exists(self, ref: str) -> bool:
        """Whether `ref` exists, whatever it names (rev() is None also for a ref to an unreadable commit)."""
        return self.run("show-ref", "--verify", "--quiet", "--end-of-options", ref, check=False).status == 0

    def tag(self, name: str, commit: str) -> None:
        """A lightweight tag, never signed."""
        self.run("tag", "--no-sign", "--end-of-options", name, commit)

    def check_readable(self, commit: str) -> None:
        """Every file of `commit` reads (an archive written to nowhere); GitFailed where one does not."""
        self.run("archive", "--format=tar", f"--output={os.devnull}", "--end-of-options", commit)

    def fsck(self) -> None:
        """`git fsck` of every object; GitFailed naming the damage."""
        self.run("fsck", "--no-dangling", "--no-progress")

    def merge_tree(self, ours: str, theirs: str) -> tuple[bool, str, list[str], str]:
        """`git merge-tree --write-tree` of two commits: (clean, the tree, the conflicted paths, git's messages)."""
        result = self.run("merge-tree", "--write-tree", "--name-only", "--messages", "--end-of-options", ours, theirs,
                          check=False)
        # --write-tree --name-only --messages: the tree, the conflicted paths, a blank line, the messages
        head, _, messages = result.stdout.partition("\n\n")
        tree, *conflicted = head.splitlines() or [""]
        return result.status == 0, tree, [path for path in conflicted if path], messages

    def cherry_pick_no_commit(self, commit: str) -> Completed:
        """`git cherry-pick --no-commit` (conflicts left in the work tree); the result, not raised."""
        return self.run("cherry-pick", "--no-commit", "--allow-empty", "--end-of-options", commit, check=False)

    def delete_ref(self, ref: str) -> None:
        self.run("update-ref", "-d", "--end-of-options", ref)

    def has_object(self, sha: str) -> bool:
        return self.run("cat-file", "-e", "--end-of-options", sha, check=False).status == 0

    def commit_directory(self, directory: Path, *, message: str, date: str) -> str:
        """Commit the content of `directory` (no parent) through a private index; returns the commit."""
        index = self.git_dir / f"forkbuild-import-{os.getpid()}.index"
        env = {"GIT_INDEX_FILE": str(index), "GIT_WORK_TREE": str(directory),
               "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
        try:
            self.run("add", "--all", "--force", ".", env=env)
            tree = self.out("write-tree", env=env)
        finally:
            index.unlink(missing_ok=True)
        return self.out("commit-tree", tree, "-m", message, env=env)

    def add_worktree(self, path: Path, commit: str, *, checkout: bool = True, parallel: bool = False,
                     only: Sequence[str] | None = None) -> Git:
        """A detached work tree at `commit` (checkout=False: no files or index yet; parallel: a worker per core;
        only: a sparse tree of just these files, the rest of `commit` in its index, marked skip-worktree)."""
        self.run(*(["-c", "checkout.workers=0"] if parallel else []), "worktree", "add", "--force", "--detach",
                 *([] if checkout and only is None else ["--no-checkout"]), "--", str(path), _revision(commit))
        tree = Git(path)
        if only is not None:
            patterns = _file_patterns(only) or "/.forkbuild-nothing\n"  # none: still sparse, with no file
            tree.run("sparse-checkout", "set", "--no-cone", "--stdin", input=patterns)
        return tree

    def widen(self, paths: Iterable[str]) -> None:
        """A sparse tree (add_worktree's `only`) holds `paths` too, so a person can edit and `git add`
        them (a conflict in a file upstream renamed); nothing in a full tree."""
        if (self.git_dir / "info" / "sparse-checkout").is_file() and (patterns := _file_patterns(paths)):
            self.run("sparse-checkout", "add", "--stdin", input=patterns)

    def remove_worktree(self, path: Path) -> None:
        """Unregister and delete a work tree of this repository (forced twice: a killed checkout locks it)."""
        self.prune_worktrees()
        if Path(path).resolve() in {tree.resolve() for tree in self.worktrees()}:
            self.run("worktree", "remove", "--force", "--force", "--", str(path))

    def worktrees(self) -> list[Path]:
        """Every work tree of this repository (the main one first)."""
        listing = self.out("worktree", "list", "--porcelain")
        return [Path(line.removeprefix("worktree ")) for line in listing.splitlines() if line.startswith("worktree ")]

    def unlock_worktree(self, path: Path) -> None:
        """Unlock a work tree (a killed `worktree add` leaves it locked); nothing where it is not."""
        self.run("worktree", "unlock", str(Path(path).resolve()), check=False)

    def prune_worktrees(self) -> None:
        self.run("worktree", "prune")

    def status_porcelain(self) -> str:
        """Uncommitted changes (an untracked directory is one line)."""
        return self.out("status", "--porcelain", "--untracked-files=normal")

    def head(self) -> str:
        return self.out("rev-parse", "HEAD")

    def checkout_detached(self, commit: str) -> None:
        self.run("checkout", "--quiet", "--detach", _revision(commit))

    def reset_hard(self, commit: str) -> None:
        self.run("reset", "--quiet", "--hard", _revision(commit))

    def commits(self, base: str, head: str) -> list[str]:
        """Commits in base..head, oldest first."""
        return self.out("rev-list", "--reverse", "--end-of-options", f"{base}..{head}").split()

    def am_in_progress(self) -> bool:
        return (self.git_dir / "rebase-apply").exists()

    def fuzz_needed(self, patch: Path) -> int | None:
        """The context lines `patch` must ignore to apply on HEAD (in a private index), or None."""
        index = self.git_dir / f"forkbuild-fuzz-{os.getpid()}.index"
        env = {"GIT_INDEX_FILE": str(index)}
        try:
            self.run("read-tree", "HEAD", env=env)
            for context in (2, 1, 0):
                if self.run("apply", "--cached", "--check", f"-C{context}", "--", str(patch), env=env, check=False).status == 0:
                    return 3 - context
            return None
        finally:
            index.unlink(missing_ok=True)

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        result = self.run("merge-base", "--is-ancestor", "--end-of-options", ancestor, descendant, check=False)
        if result.status not in (0, 1):  # 1: not an ancestor; anything else: a failure
            raise GitFailed(["git", "merge-base", "--is-ancestor", ancestor, descendant], result.status,
                            result.stdout, result.stderr)
        return result.status == 0

    def unmerged_paths(self) -> list[str]:
        """Paths with conflicting stages in the index."""
        return self.out("diff", "--name-only", "--diff-filter=U").splitlines()

    def clean_untracked(self) -> None:
        self.run("clean", "-fdq")

    def refs(self) -> dict[str, str]:
        listing = self.out("for-each-ref", "--format=%(refname) %(objectname)")
        return dict(line.split(" ", 1) for line in listing.splitlines())

    def file_at(self, commit: str, path: str) -> str | None:
        """`path`'s content at `commit` (not stripped), None where `commit` has no such path."""
        shown = self.run("cat-file", "blob", "--end-of-options", f"{commit}:{path}", check=False)
        if shown.status == 0:
            return shown.stdout
        if f"path '{path}' does not exist in" in shown.stderr:
            return None
        raise GitFailed(["git", "cat-file", "blob", f"{commit}:{path}"], shown.status, shown.stdout, shown.stderr)

    def show_file(self, commit: str, path: str) -> str:
        """`path`'s content at `commit`, not stripped."""
        return self.run("cat-file", "blob", "--end-of-options", f"{commit}:{path}").stdout

    def range_diff(self, old: str, new: str, *, creation_factor: int) -> str:
        return self.out("range-diff", "--no-color", f"--creation-factor={creation_factor}", old, new)

    def diff_tree_patch(self, commit: str) -> str:
        # Not stripped: that would cut a blank context line (" ") off the last hunk.
        return self.run("diff-tree", "--no-commit-id", "-p", "--full-index", "--no-renames", "--end-of-options", f"{commit}^", commit).stdout

    def format_patch(self, commit: str) -> str:
        return self.run("format-patch", "--stdout", "-1", *FORMAT_PATCH_FLAGS, "--end-of-options", commit).stdout

    def renamed(self, base: str, head: str) -> dict[str, str]:
        """Files `head` has under another name than `base` (old path -> new path), as git detects renames."""
        raw = self.run("diff", "--name-status", "-M", "--diff-filter=R", "-z", "--end-of-options", base, head).stdout
        fields = [field for field in raw.split("\0") if field]
        return {fields[index + 1]: fields[index + 2] for index in range(0, len(fields), 3)}

    def changed_files(self, base: str, head: str) -> list[tuple[str, str]]:
        raw = self.run("diff", "--name-status", "--no-renames", "-z", "--end-of-options", base, head).stdout
        fields = [field for field in raw.split("\0") if field]
        return list(zip(fields[0::2], fields[1::2], strict=True))

    def merge_commits(self, base: str, head: str) -> list[str]:
        return self.out("rev-list", "--merges", "--end-of-options", f"{base}..{head}").split()

    def staged(self) -> list[str]:
        """The paths whose index differs from HEAD (changes staged for a commit)."""
        return self.out("diff", "--cached", "--name-only", "HEAD").splitlines()

    def log1(self, format: str, commit: str = "HEAD") -> str:
        """`commit`'s fields in a `git log --format` (dates raw), e.g. "%s" its subject, "%B" its message."""
        return self.out("log", "-1", f"--format={format}", "--date=raw", "--end-of-options", commit)

    def commit(self, message: str, *, env: Mapping[str, str] | None = None, amend: bool = False) -> str:
        """Commit the index with `message` verbatim (-m would re-wrap it); the new HEAD."""
        self.run("commit", "--quiet", *(["--amend"] if amend else []), "--cleanup=verbatim", "-F", "-",
                 env=env, input=message)
        return self.head()

    def format_patches(self, base: str, head: str) -> list[bytes]:
        """Every commit of base..head as format_patch writes it, oldest first."""
        with tempfile.TemporaryDirectory(prefix="forkbuild-format-") as scratch:
            self.run("format-patch", "--quiet", "-o", scratch, *FORMAT_PATCH_FLAGS, "--end-of-options", f"{base}..{head}")
            return [path.read_bytes() for path in sorted(Path(scratch).iterdir())]

    def fetch(self, url: str, ref: str) -> None:
        self.run("fetch", "--no-tags", "--quiet", "--", url, _revision(ref), interactive=True)

    # -- private indexes and fast-import (no work tree) --------------------
    def read_tree(self, tree: str, *, index: Path) -> None:
        self.run("read-tree", "--end-of-options", tree, env={"GIT_INDEX_FILE": str(index)})

    def changed_blobs(self, base: str, head: str) -> list[tuple[str, str, str, str]]:
        """(status letter, path, new mode, new blob) of every changed file (deleted: mode 000000)."""
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

    def apply_to_index(self, patch: Path | Sequence[Path], *, index: Path, three_way: bool = False,
                       check: bool = False, reverse: bool = False, strip: int = 1, unidiff_zero: bool = False) -> Completed:
        """`git apply --cached -v` (no fuzz) of `patch` (or several, all or none) into `index`; not raised."""
        patches = [patch] if isinstance(patch, Path) else list(patch)
        args = ["apply", "--cached", "-v", f"-p{strip}", *(["--unidiff-zero"] if unidiff_zero else []),
                *(["--3way"] if three_way else []), *(["--check"] if check else []),
                *(["--reverse"] if reverse else []), "--", *map(str, patches)]
        return self.run(*args, env={"GIT_INDEX_FILE": str(index)}, check=False)

    def write_tree(self, *, index: Path | None = None) -> str:
        return self.out("write-tree", env={"GIT_INDEX_FILE": str(index)} if index else None)

    def tree_entries(self, commit: str, paths: Iterable[str] | None = None) -> dict[str, TreeEntry]:
        """path -> entry of every file of `commit`'s tree; with `paths`, of each of them the tree holds:
        a file, symlink, gitlink or directory (mode 0o040000), read literally ("*" matches only itself)."""
        wanted = None if paths is None else sorted(set(paths))
        runs = [("-r", [])] if wanted is None else [("-t", wanted[at:at + 1000]) for at in range(0, len(wanted), 1000)]
        listed = {}
        for flag, batch in runs:  # a command line of any number of paths
            listing = self.run("ls-tree", flag, "-z", "--full-tree", "--end-of-options", commit, *batch,
                               env={"GIT_LITERAL_PATHSPECS": "1"}).stdout
            for item in listing.split("\0"):
                if item:
                    meta, path = item.split("\t", 1)
                    mode, _, blob = meta.split(" ")
                    listed[path] = TreeEntry(int(mode, 8), blob)
        return listed if wanted is None else {path: listed[path] for path in wanted if path in listed}

    def read_index(self, index: Path) -> dict[str, TreeEntry]:
        """path -> entry of every stage-0 entry of a private index."""
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
        """The commits from one `git fast-import`, their ids in order (the ids `commit_tree` gives);
        date_format "raw": any "<seconds> <+zone>" (rfc2822 parses only from 1973 on)."""
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
        stream += f"reset {IMPORT_REF}\n".encode()  # no ref is kept: the ids come back per `get-mark`
        stream += "".join(f"get-mark :{number}\n" for number in range(1, len(commits) + 1)).encode()
        return self.run("fast-import", "--quiet", "--force", f"--date-format={date_format}", input=bytes(stream)).stdout.split()

    def parents(self, commit: str) -> list[str]:
        return self.log1("%P", commit).split()

    def tree_of(self, commit: str) -> str:
        return self.out("rev-parse", "--verify", "--end-of-options", f"{commit}^{{tree}}")

    def commit_tree(self, tree: str, *, parents: Iterable[str], message: str, author: Author) -> str:
        """A commit of `tree` by `author`, committed at the author's date: same input, same id."""
        env = {"GIT_AUTHOR_NAME": author.name, "GIT_AUTHOR_EMAIL": author.email,
               "GIT_AUTHOR_DATE": author.date, "GIT_COMMITTER_DATE": author.date}
        parent_args = [arg for parent in parents for arg in ("-p", parent)]
        return self.run("commit-tree", tree, *parent_args, "-F", "-", env=env, input=message).stdout.strip()

    def authored(self, commit: str) -> tuple[Author, str]:
        """Who wrote `commit` and when, and its message byte for byte."""
        name, email, date = self.log1("%an%x00%ae%x00%ad", commit).split("\0")
        message = self.run("cat-file", "commit", "--end-of-options", commit).stdout.partition("\n\n")[2]
        return Author(name=name, email=email, date=date), message

    def sequencer_quit(self) -> None:
        """Forget a stopped cherry-pick (its changes stay in the work tree)."""
        if (self.git_dir / "CHERRY_PICK_HEAD").exists() or (self.git_dir / "sequencer").exists():
            self.run("cherry-pick", "--quit", check=False)
            (self.git_dir / "CHERRY_PICK_HEAD").unlink(missing_ok=True)

    def apply_worktree(self, patch: Path, *, three_way: bool = False, reject: bool = False) -> Completed:
        """`git apply --index` (or --3way, or --reject) in the work tree. Not raised."""
        mode = ["--3way"] if three_way else ["--index", "--reject"] if reject else ["--index"]
        return self.run("apply", "-v", *mode, "--", str(patch), check=False)

    def stage(self, paths: Iterable[str]) -> None:
        """`git add -A` of `paths` (removals included)."""
        self.run("add", "-A", "--", *paths)

    def apply_files(self, patch: Path, *, context: int, unidiff_zero: bool = False) -> bool:
        """`git apply` to the work tree's files (no index), at least `context` lines of context; applied?"""
        zero = ["--unidiff-zero"] if unidiff_zero else []
        return self.run("apply", f"-C{context}", *zero, "--", str(patch), check=False).status == 0

    def merge_file(self, ours: Path, base: Path, theirs: Path) -> str | None:
        """`git merge-file -p`: the merged text, or None where it conflicts."""
        merged = self.run("merge-file", "-p", "--quiet", str(ours), str(base), str(theirs), check=False)
        return merged.stdout if merged.status == 0 else None

    def untracked(self, pattern: str) -> list[str]:
        """Untracked (not ignored) files matching the pathspec `pattern`."""
        return self.out("ls-files", "--others", "--exclude-standard", "--", pattern).splitlines()

    def diff_between(self, old: str, new: str, paths: Iterable[str], *, renames: bool = False) -> str:
        return self.run("diff", "--no-color", "-M" if renames else "--no-renames", "--end-of-options", old, new, "--",
                        *paths).stdout



class Author(NamedTuple):
    """Who wrote a patch and when (date: raw or RFC 2822)."""

    name: str
    email: str
    date: str
