"""The upstream cache: pinned wheels (hashed on every use) and a git repository with one
commit per imported upstream, tagged `upstream/<version>+<key>` (Upstream.tag); earlier versions stay
(the rebase's 3-way merges need their blobs). A file lock lets processes share it.

The pin verifies what is built from, not only the download: the import of a verified wheel
is deterministic, and the commit it made is recorded (verified.json) when it is made; every
use checks the tag against the record (a git pin: against the pinned commit itself), and
`fetch --verify` imports the pinned wheel again and compares. A moved tag is an error."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from forkbuild.console import Reporter
from forkbuild.errors import LockTimeout, UpstreamError
from forkbuild.io.fsutil import flocked, write_atomic
from forkbuild.io.git import Git, GitFailed
from forkbuild.series.config import FilePin, Upstream

LOCK_TIMEOUT_SECONDS = 900
# What git says when an object it needs cannot be read (truncated, corrupt, missing).
DAMAGE_SIGNS = ("corrupt", "unable to unpack", "inflate", "bad object", "unable to read", "missing blob",
                "missing tree", "invalid object", "packfile", "did not match")
IMPORT_DATE = "946684800 +0000"  # the same upstream gives the same commit id everywhere


def sha256_of(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


class UpstreamCache:
    def __init__(self, path: Path, *, reporter: Reporter | None = None) -> None:
        self.path = Path(path)
        self.repo_path = self.path / "upstream.git"
        self.wheels_dir = self.path / "wheels"
        self.reporter = reporter or Reporter()

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the cache lock; waiting longer than LOCK_TIMEOUT_SECONDS raises LockTimeout."""
        busy = LockTimeout(f"{self.path / 'lock'} is held by another process for over {LOCK_TIMEOUT_SECONDS}s",
                           hint="wait for the other forkbuild/nox run to finish (the lock is an flock: "
                                "the system releases it when its process ends, so it is never stale)")
        with flocked(self.path / "lock", wait_s=LOCK_TIMEOUT_SECONDS, busy=busy):
            yield

    def _whole(self) -> bool:
        """Whether the cache's repository is there (HEAD and objects/: what git needs)."""
        return (self.repo_path / "HEAD").is_file() and (self.repo_path / "objects").is_dir()

    def git(self) -> Git:
        if not self._whole():
            self._create_repo()
        repo = Git(self.repo_path)
        repo.own_attributes()  # a cache made before forkbuild wrote them
        return repo

    def _create_repo(self) -> None:
        """A new bare repository, made aside and renamed into place: no other process sees, and no kill
        leaves, half of one (`git init` writes HEAD before objects/)."""
        if self.repo_path.exists() and not (self.repo_path / "objects").exists():
            shutil.rmtree(self.repo_path, ignore_errors=True)  # half of one, from before: no object in it
        self.path.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=self.path, prefix=".upstream.git-"))
        try:
            Git.init(scratch, bare=True)
            try:
                os.rename(scratch, self.repo_path)
            except OSError:
                if not self._whole():  # not another process's, made meanwhile: a real failure
                    raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def imported(self, upstream: Upstream) -> str | None:
        """The commit of an already imported version (no lock), checked against what the pin
        imported as; UpstreamError if git cannot read it or the tag was moved."""
        if not self._whole():
            return None
        repo = Git(self.repo_path)
        tag = f"refs/tags/{upstream.tag}"
        commit = repo.rev(tag)
        if commit is None and repo.ref_exists(tag):
            raise self.damaged(f"its tag {upstream.tag} names a commit git cannot read")
        if commit is not None:
            expected = self.verified(upstream)
            if expected is None:
                return None  # imported before imports were recorded: imported again (the same commit) and recorded
            if commit != expected:
                raise self.moved(upstream, commit, expected)
        return commit

    def verified(self, upstream: Upstream) -> str | None:
        """The commit the pin imports as (a git pin's commit; else as recorded at import), or None.
        What a work tree is compared with, even when the tag was moved (export still saves work)."""
        if upstream.source == "git" and upstream.git:
            return upstream.git.commit
        return self._verified().get(upstream.tag)

    @property
    def verified_path(self) -> Path:
        return self.path / "verified.json"

    def _verified(self) -> dict[str, str]:
        """tag -> the commit the verified download imported as."""
        try:
            data = json.loads(self.verified_path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as error:
            raise self.damaged(f"{self.verified_path} is not readable JSON ({error})") from None
        return {key: value for key, value in data.items() if isinstance(key, str) and isinstance(value, str)}

    def _record(self, upstream: Upstream, commit: str) -> None:
        write_atomic(self.verified_path, json.dumps({**self._verified(), upstream.tag: commit}, indent=1) + "\n")

    def moved(self, upstream: Upstream, commit: str, expected: str) -> UpstreamError:
        return UpstreamError(f"the upstream cache {self.repo_path} does not hold what the pin imports as: its tag "
                             f"{upstream.tag} names {commit[:12]}, the verified {upstream.name} {upstream.version} "
                             f"is {expected[:12]} (the tag was moved: a poisoned or damaged cache)",
                             hint=f"export any work in .forkbuild-work (`forkbuild export`), then move {self.path} "
                                  "and .forkbuild-work aside (its trees keep their git data in that cache) and run "
                                  "`forkbuild fetch`: it imports the pinned release anew")

    def damaged(self, what: str) -> UpstreamError:
        return UpstreamError(f"the upstream cache {self.repo_path} is damaged: {what}",
                             hint=f"`forkbuild fetch --verify` names the damage; then move {self.path} aside "
                                  "(export any work in .forkbuild-work first) and run `forkbuild fetch`")

    def explain(self, error: BaseException) -> UpstreamError | None:
        """What `error` means when the cache is gone or damaged; None when the cache is not the cause."""
        if isinstance(error, UpstreamError):
            return None
        if not self.repo_path.is_dir() and isinstance(error, GitFailed | FileNotFoundError):
            return UpstreamError(f"the upstream cache {self.path} was removed while forkbuild was using it",
                                 hint="run the command again: it imports upstream anew (a work tree that kept "
                                      "its git data in that cache is lost to git: move it aside if refused)")
        if isinstance(error, GitFailed) and any(sign in error.stderr for sign in DAMAGE_SIGNS):
            return self.damaged(error.stderr.splitlines()[-1])
        return None

    def check_readable(self, commit: str) -> None:
        """`fetch`: every file of `commit` reads (damage is named here, not in a later command)."""
        try:
            self.git().check_readable(commit)
        except GitFailed as error:
            raise self.explain(error) or self.damaged(error.stderr) from None

    def ensure(self, upstream: Upstream) -> str:
        """The cache commit of `upstream`, importing it first if needed."""
        if commit := self.imported(upstream):
            return commit
        with self.locked():
            if commit := self.imported(upstream):  # another process imported it meanwhile
                return commit
            repo = self.git()
            tagged = repo.rev(f"refs/tags/{upstream.tag}")
            with self.reporter.step(f"Importing {upstream.name} {upstream.version} ({upstream.source})"):
                if upstream.source == "git":
                    commit = self._import_git(upstream)
                else:  # the .py files are the same in every Python tag's wheel (series.toml pins one at least)
                    commit = self._import_wheel(upstream, self._wheel_locked(upstream.wheels[0]))
                if tagged is not None and tagged != commit:  # a tag from before imports were recorded
                    raise self.moved(upstream, tagged, commit)
                if tagged is None:
                    repo.tag(upstream.tag, commit)
                self._record(upstream, commit)
            return commit

    def wheel(self, pin: FilePin) -> Path:
        """The wheel file for `pin`, hashed on every use; downloaded when missing or not matching."""
        cached = self.wheels_dir / pin.filename
        if cached.is_file() and sha256_of(cached) == pin.sha256:  # a mismatch is said once, under the lock
            return cached
        with self.locked():
            return self._wheel_locked(pin)

    def verify(self, upstream: Upstream) -> list[str]:
        """`fetch --verify`: re-hash the cached wheels (fetching a mismatch again), `git fsck`; what was checked."""
        checked = []
        for pin in upstream.wheels:
            if (self.wheels_dir / pin.filename).exists():
                self.wheel(pin)
                checked.append(f"{pin.filename}: sha256 matches the pin")
        if (self.repo_path / "HEAD").exists():
            try:
                self.git().fsck()
            except GitFailed as error:
                raise UpstreamError(f"{self.repo_path} is damaged (git fsck):\n{error.stderr or error.stdout}",
                                    hint=f"move {self.repo_path} aside and run `forkbuild fetch` to import it anew") from None
            checked.append(f"{self.repo_path}: git fsck clean")
            tagged = Git(self.repo_path).rev(f"refs/tags/{upstream.tag}")
            if tagged is not None and upstream.source == "wheel" and upstream.wheels:
                # The record could be edited with the tag: the pinned wheel imported again decides.
                with self.locked():
                    expected = self._import_wheel(upstream, self._wheel_locked(upstream.wheels[0]))
                if tagged != expected:
                    raise self.moved(upstream, tagged, expected)
                checked.append(f"{upstream.tag}: the pinned {upstream.wheels[0].filename} imports as it ({expected[:12]})")
        return checked

    def _matches_pin(self, wheel: Path, pin: FilePin) -> bool:
        if sha256_of(wheel) == pin.sha256:
            return True
        self.reporter.warn(f"{wheel}: does not match its sha256 pin (changed or damaged): fetching it again")
        return False

    # -- with the lock held --
    def _wheel_locked(self, pin: FilePin) -> Path:
        target = self.wheels_dir / pin.filename
        mismatch = target.is_file() and not self._matches_pin(target, pin)
        if target.is_file() and not mismatch:
            return target
        self.wheels_dir.mkdir(parents=True, exist_ok=True)
        try:
            return self._download_pinned(pin, target)
        except UpstreamError as error:
            if not mismatch:
                raise
            # Never build from it: the cached file stays as it is (for a look), unused.
            raise UpstreamError(f"{target} does not match its pin (series.toml: sha256 {pin.sha256}) and fetching "
                                f"it again failed: {error.message}",
                                hint="connect to the network and run `forkbuild fetch --verify`, or put the "
                                     f"right {pin.filename} there") from None

    def _download_pinned(self, pin: FilePin, target: Path) -> Path:
        import urllib.error  # here, with the index client: only a download needs them
        import urllib.request

        from forkbuild.upstream.pypi import find_file

        url = pin.url or find_file(pin.filename.split("-")[0], pin.filename).url
        handle, partial_name = tempfile.mkstemp(dir=self.wheels_dir, prefix=f".{pin.filename}.", suffix=".part")
        partial = Path(partial_name)
        try:
            try:
                with os.fdopen(handle, "wb") as out, urllib.request.urlopen(url, timeout=120) as response, \
                        self.reporter.download_progress() as progress:
                    length = response.headers.get("Content-Length") or ""  # a server's word: a number, or not
                    size = int(length) if length.isdigit() and int(length) else None
                    task = progress.add_task(pin.filename, total=size)
                    for block in iter(lambda: response.read(1 << 20), b""):
                        out.write(block)
                        progress.advance(task, len(block))
            except (urllib.error.URLError, OSError) as error:
                raise UpstreamError(f"download of {url} failed: {error}") from error
            actual = sha256_of(partial)
            if actual != pin.sha256:
                raise UpstreamError(
                    f"{pin.filename}: sha256 mismatch: series.toml pins {pin.sha256}, {url} gave {actual}",
                    hint="nothing in the cache was changed; check the pin in series.toml [[upstream.wheels]]")
            # mkstemp makes the file 0600; the wheel is copied into images and venvs.
            partial.chmod(0o644)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        return target

    def _import_wheel(self, upstream: Upstream, wheel: Path) -> str:
        """Lay the wheel's packages out under <package_root>/ and commit them."""
        with tempfile.TemporaryDirectory(prefix="forkbuild-import-") as scratch:
            root = Path(scratch) / upstream.package_root
            import zipfile  # only where a wheel is imported: not on every start

            with zipfile.ZipFile(wheel) as archive:
                members = [name for name in archive.namelist()
                           if not name.split("/", 1)[0].endswith((".dist-info", ".data"))]
                archive.extractall(root, members=members)
                for info in archive.infolist():
                    # zipfile drops permissions; keep the executable bit git tracks.
                    if info.filename in members and (info.external_attr >> 16) & 0o111:
                        (root / info.filename).chmod(0o755)
            message = f"{upstream.name} {upstream.version} (release wheel {wheel.name})\n\nsha256: {sha256_of(wheel)}\n"
            return self.git().commit_directory(Path(scratch), message=message, date=IMPORT_DATE)

    def _import_git(self, upstream: Upstream) -> str:
        pin = upstream.git
        if not pin or not pin.url or not pin.commit:
            raise UpstreamError("upstream.git: url and commit are required for source = 'git'")
        repo = self.git()
        if not repo.has_object(pin.commit):
            try:
                repo.fetch(pin.url, pin.commit)
            except GitFailed as error:
                raise UpstreamError(f"cannot fetch {pin.commit} from {pin.url}: {error.stderr}") from error
        commit = repo.rev(pin.commit)
        if commit is None:
            raise UpstreamError(f"{pin.url} has no commit {pin.commit}")
        if not (pin.commit and commit.startswith(pin.commit)):
            raise UpstreamError(f"{pin.url}: {pin.commit} resolved to {commit}; pin the full commit id")
        return commit
