"""series.toml, parsed once into frozen dataclasses and validated as a whole: every problem
at once, each naming its key and line, with a "perhaps you meant" for near misses."""

from __future__ import annotations

import dataclasses
import graphlib
import hashlib
import json
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from forkbuild.errors import ConfigError
from forkbuild.series.guards import GUARD_TYPES, check_value, parse_switch

UPSTREAM_SOURCES = ("wheel", "git")
UPSTREAM_STATUSES = ("local", "submitted", "upstreamed")
GUARD_PREFIX = "DSV41_"
# The one rule for names that reach generated source, commit messages and command lines.
FEATURE_NAME = re.compile(r"[a-z][a-z0-9_]*")
# A wheel's local version label (PEP 440: runs of letters and digits, one . _ or - between them) and
# the start of an image tag (docker's: at most 128 characters; `-<mode>-<arch>` follows).
VARIANT_NAME = re.compile(r"(?=.{1,64}$)[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*")
GUARD_NAME = re.compile(re.escape(GUARD_PREFIX) + r"[A-Z0-9]+(?:_[A-Z0-9]+)*")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a variable an image's ENV sets
VERSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
VERSION_RULE = ("a version name is letters, digits and . _ + - (like 0.5.24.dev1), starting with a letter or digit: "
                "it names a cache tag and the report's file")
COMMIT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
GIT_SCHEMES = ("https", "http", "ssh", "git", "file")
# The platforms a build can target (Docker's names) and the machine each is in wheel tags.
PLATFORMS = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
ANY_PLATFORM = "any"  # a pure wheel's: it serves every platform


def platform_of_tags(filename: str) -> str | None:
    """The Docker platform of a wheel file name's platform tag, ANY_PLATFORM for a pure wheel
    (None: not a Linux x86_64/aarch64 wheel)."""
    platform_tag = filename.removesuffix(".whl").rsplit("-", 1)[-1]
    if platform_tag == "any":
        return ANY_PLATFORM
    for platform, machine in PLATFORMS.items():
        if platform_tag.startswith(("manylinux", "musllinux", "linux")) and platform_tag.endswith(f"_{machine}"):
            return platform
    return None


def native_platform() -> str:
    """The platform of the machine forkbuild runs on (where test-patch installs its wheel)."""
    import platform

    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine())
    return next((name for name, arch in PLATFORMS.items() if arch == machine), "linux/amd64")


def image_platforms(platforms: Iterable[str]) -> tuple[str, ...]:
    """The platforms images are built for: a pure wheel's ANY_PLATFORM is this machine's."""
    return tuple(dict.fromkeys(native_platform() if platform == ANY_PLATFORM else platform for platform in platforms))


def arch_of(platform: str) -> str:
    """`arm64` of `linux/arm64`: the suffix of an image tag or build folder."""
    return platform.rsplit("/", 1)[-1]


@dataclass(frozen=True, kw_only=True)
class GitPin:
    url: str
    ref: str = ""
    commit: str = ""


@dataclass(frozen=True, kw_only=True)
class FilePin:
    """A file from PyPI (or `url`), pinned by its sha256."""

    filename: str
    sha256: str
    url: str = ""


@dataclass(frozen=True, kw_only=True)
class WheelPin(FilePin):
    python_tag: str

    @property
    def platform(self) -> str:
        return platform_of_tags(self.filename) or ""


@dataclass(frozen=True, kw_only=True)
class PackagePin(FilePin):
    """A pure wheel an image installs when its variant's defaults need it and the base lacks it."""

    @property
    def project(self) -> str:
        return self.filename.split("-", 1)[0]


@dataclass(frozen=True, kw_only=True)
class Upstream:
    name: str
    version: str
    package_root: str
    source: str
    git: GitPin | None
    wheels: tuple[WheelPin, ...]
    empty_dirs: tuple[str, ...] = ()  # directories upstream ships empty: apply recreates them

    @property
    def pin(self) -> str:
        """The git commit id, or the sha256 of the wheel upstream is imported from."""
        if self.source == "git":
            return self.git.commit if self.git else ""
        return self.wheels[0].sha256 if self.wheels else ""

    @property
    def tag(self) -> str:
        """The cache's tag: keyed by the pin too, so a moved pin is imported anew; a wheel's also by
        the package_root it is laid out under (a changed root is another import, never the old tree)."""
        if not self.pin:
            return f"upstream/{self.version}"
        key = self.pin if self.source == "git" else \
            hashlib.sha256(f"{self.pin}\0{self.package_root}".encode()).hexdigest()
        return f"upstream/{self.version}+{key[:16]}"

    @property
    def platforms(self) -> tuple[str, ...]:
        """The platforms pinned, in pin order."""
        return tuple(dict.fromkeys(pin.platform for pin in self.wheels))

    def python_tags(self, platform: str) -> tuple[str, ...]:
        return tuple(pin.python_tag for pin in self.wheels if pin.platform in (platform, ANY_PLATFORM))

    def wheel_for(self, python_tag: str, platform: str) -> WheelPin:
        for pin in self.wheels:
            if pin.python_tag == python_tag and pin.platform in (platform, ANY_PLATFORM):
                return pin
        known = ", ".join(f"{pin.python_tag} {pin.platform}" for pin in self.wheels) or "none"
        raise ConfigError([f"upstream.wheels: no wheel pinned for {python_tag} on {platform} (pinned: {known})"])


@dataclass(frozen=True, kw_only=True)
class Guard:
    env: str
    type: str
    default: str
    feature: str
    description: str = ""


@dataclass(frozen=True, kw_only=True)
class Feature:
    name: str
    description: str
    requires: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    guards: tuple[Guard, ...] = ()
    ported: bool = True  # false: it lost its last patch; in no variant until it has one


@dataclass(frozen=True, kw_only=True)
class PatchEntry:
    file: str
    feature: str
    path: Path
    upstream_status: str = "local"
    unguarded: str = ""


@dataclass(frozen=True, kw_only=True)
class Variant:
    name: str
    description: str
    features: tuple[str, ...]
    env: Mapping[str, str]
    platforms: tuple[str, ...] = ()  # what it builds for; series.toml's default: every pinned platform


@dataclass(frozen=True, kw_only=True)
class Hazard:
    """A combination of guard values known to break a deployment ([[hazards]]): doctor warns, launch refuses."""

    name: str
    reason: str
    when: Mapping[str, str]  # guard -> value; every one must hold (a switch compares on/off)
    variants: tuple[str, ...] = ()  # empty: every variant

    def holds(self, guards: Mapping[str, Guard], environ: Mapping[str, str], *, variant: str) -> bool:
        if self.variants and variant not in self.variants:
            return False
        return all(_same_value(guards[env], environ.get(env, guards[env].default), wanted)
                   for env, wanted in self.when.items())


def _same_value(guard: Guard, value: str, wanted: str) -> bool:
    if guard.type != "switch":
        return value.strip() == wanted
    try:
        return parse_switch(value) == parse_switch(wanted)
    except ValueError:
        return False


@dataclass(frozen=True, kw_only=True)
class Series:
    path: Path
    name: str
    default_variant: str
    upstream: Upstream
    features: Mapping[str, Feature]
    patches: tuple[PatchEntry, ...]
    variants: Mapping[str, Variant]
    runtime_env: Mapping[str, str] = field(default_factory=dict)
    packages: tuple[PackagePin, ...] = ()  # [[runtime.packages]]: pure wheels an image may need
    hazards: tuple[Hazard, ...] = ()
    guards_module: str = ""  # the dotted module forkbuild generates guards into; "": none

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def patches_dir(self) -> Path:
        return self.root / "patches"

    def variant(self, name: str) -> Variant:
        if name not in self.variants:
            raise ConfigError([unknown(name, self.variants, "variant")], source=str(self.path))
        return self.variants[name]

    def patches_for(self, variant: str) -> tuple[PatchEntry, ...]:
        return self.patches_of(self.variant(variant).features)

    def patches_of(self, features: Iterable[str]) -> tuple[PatchEntry, ...]:
        chosen = set(features)
        return tuple(entry for entry in self.patches if entry.feature in chosen)

    def guards_for(self, features: Iterable[str]) -> tuple[Guard, ...]:
        return tuple(guard for name in features for guard in self.features[name].guards)

    def all_guards(self) -> tuple[Guard, ...]:
        return self.guards_for(self.features)

    def build_hash(self, *, name: str, features: Iterable[str], env: Mapping[str, str],
                   extra: Mapping[str, str] | None = None) -> str:
        """sha256 of a build of `features` named `name` with runtime defaults `env`."""
        features = tuple(features)
        identity = {
            "upstream": {
                "name": self.upstream.name,
                "version": self.upstream.version,
                "source": self.upstream.source,
                "git": self.upstream.git and [self.upstream.git.url, self.upstream.git.commit],
                "wheels": sorted(pin.sha256 for pin in self.upstream.wheels),
            },
            "variant": name,
            "guards_module": self.guards_module,
            "features": sorted(features),
            "guards": [[g.env, g.type, g.default] for g in self.guards_for(features)],
            "env": dict(sorted(env.items())),
            "runtime_env": dict(sorted(self.runtime_env.items())),
            "patches": [[p.file, p.feature, hashlib.sha256(p.path.read_bytes()).hexdigest()]
                        for p in self.patches_of(features)],
            **(extra or {}),
        }
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def near_miss(name: str, known: Iterable[str]) -> str:
    """' (perhaps you meant 'x'?)' for the closest of `known`, or ''."""
    import difflib  # only a problem needs it

    matches = difflib.get_close_matches(name, list(known), n=1)
    return f" (perhaps you meant {matches[0]!r}?)" if matches else ""


def _header(name: str) -> re.Pattern[str]:
    return re.compile(r"^\s*\[\[?\s*" + re.escape(name) + r"\s*\]\]?\s*(#.*)?$")


class _Problems:
    """Collects problems, each located by the key path and the line it sits on."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.items: list[str] = []
        self.keys: set[str] = set()

    def _table_start(self, key: str) -> int:
        """Index of the header line of the innermost table `key` lies in."""
        item = re.match(r"^([\w.-]+)\[(\d+)\]", key)
        if item:  # an array of tables: the n-th [[header]]
            starts = [number for number, line in enumerate(self.lines) if _header(item[1]).search(line)]
            if int(item[2]) < len(starts):
                return starts[int(item[2])]
        parts = re.sub(r"\[\d+\]", "", key).split(".")
        for end in range(len(parts), 0, -1):
            header = _header(".".join(parts[:end]))
            for number, line in enumerate(self.lines):
                if header.search(line):
                    return number
        return 0

    def line_of(self, needle: str, *, key: str = "") -> int | None:
        # tomllib keeps no positions: the header, quoted value or `key =` by text, every
        # pattern from the key's own table first (a variant's `DSV41_X = "2"` before the
        # guard's `env = "DSV41_X"` earlier in the file).
        start = self._table_start(key) if key else 0
        candidates = [needle] + ([needle.rsplit(".", 1)[-1]] if "." in needle and "[" not in needle else [])
        for candidate in candidates:
            escaped = re.escape(candidate)
            patterns = (_header(candidate), re.compile(r"[\"']" + escaped + r"[\"']"),
                        re.compile(r"(^|[{,])\s*\"?" + escaped + r"\"?\s*="))
            for offset in (start, 0):
                for pattern in patterns:
                    for number, line in enumerate(self.lines[offset:], start=offset + 1):
                        if pattern.search(line):
                            return number
        return None

    def add(self, key: str, message: str, *, near: str | None = None) -> None:
        line = self.line_of(near or key, key=key)
        where = f"{key} (line {line})" if line else key
        self.keys.add(key)
        self.items.append(f"{where}: {message}")

    def has(self, key: str) -> bool:
        """Whether `key` has a problem already (later checks then say nothing more about it)."""
        return key in self.keys

    def has_matching(self, pattern: str) -> bool:
        return any(re.fullmatch(pattern, key) for key in self.keys)

    # -- typed access: a wrong type is a problem, and the caller gets a safe empty value --
    def table(self, value: Any, where: str, *, near: str | None = None) -> Mapping[str, Any]:
        if isinstance(value, dict):
            return value
        self.add(where, f"must be a table, not {_toml_type(value)}", near=near)
        return {}

    def tables(self, value: Any, where: str, *, near: str | None = None) -> list[Mapping[str, Any] | None]:
        """An array of tables; an item that is not a table is reported and comes back as None."""
        if not isinstance(value, list):
            self.add(where, f"must be an array of tables, not {_toml_type(value)}", near=near)
            return []
        for index, item in enumerate(value):
            if not isinstance(item, dict):
                self.add(f"{where}[{index}]", f"must be a table, not {_toml_type(item)}", near=near)
        return [item if isinstance(item, dict) else None for item in value]

    def string(self, table: Mapping[str, Any], key: str, where: str, *, default: str = "",
               required: bool = False, near: str | None = None) -> str:
        value = table.get(key, default)
        if not isinstance(value, str):
            self.add(f"{where}.{key}".lstrip("."), f"must be a string, not {_toml_type(value)}", near=near or key)
            return default
        if required and not value:
            self.add(f"{where}.{key}".lstrip("."), "is required (a non-empty string)", near=near or key)
        return value

    def fields(self, table: Mapping[str, Any], kind: str, where: str, *, required: Iterable[str] = (),
               near: Mapping[str, str] | None = None) -> dict[str, str]:
        """Reports each key `kind` does not allow; reads its string keys (a wrong type: the default)."""
        allowed = _KEYS[kind]
        for key in table:
            if key not in allowed:
                self.add(f"{where}.{key}".lstrip("."), f"unknown key{near_miss(key, allowed)}", near=key)
        return {key: self.string(table, key, where, default=default, required=key in required,
                                 near=(near or {}).get(key))
                for key, default in allowed.items() if default is not None}


def _toml_type(value: Any) -> str:
    """The TOML name of a parsed value's type, for messages."""
    names = {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "an array",
             dict: "a table"}
    return names.get(type(value), f"a {type(value).__name__}")


# Each table's keys: a string key with its default, or None for one parsed on its own.
_KEYS: dict[str, dict[str, str | None]] = {
    "": dict.fromkeys(("series", "upstream", "features", "patches", "variants", "runtime", "hazards")),
    "hazards": {"name": "", "reason": "", "when": None, "variants": None},
    "series": {"name": "", "default_variant": "", "guards_module": ""},
    "upstream": {"name": "", "version": "", "package_root": "", "source": "wheel", "git": None, "wheels": None,
                 "empty_dirs": None},
    "upstream.git": {"url": "", "ref": "", "commit": ""},
    "upstream.wheels": {"python_tag": "", "filename": "", "sha256": "", "url": ""},
    "runtime.packages": {"filename": "", "sha256": "", "url": ""},
    "features.*": {"description": "", "requires": None, "conflicts": None, "guards": None, "ported": None},
    "features.*.guards": {"env": "", "type": "", "default": None, "description": ""},
    "patches": {"file": "", "feature": "", "upstream": "local", "unguarded": ""},
    "variants.*": {"description": "", "features": None, "env": None, "platforms": None},
    "runtime": {"env": None, "packages": None},
}


def _string_list(problems: _Problems, value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        problems.add(where, "must be an array of strings")
        return ()
    return tuple(value)


def _string_table(problems: _Problems, value: Any, where: str) -> dict[str, str]:
    """A table of environment variables: every value a string."""
    table = problems.table(value, where)
    wrong = [key for key, item in table.items() if not isinstance(item, str)]
    if wrong:
        problems.add(where, f"values must be strings (they become environment variables): {', '.join(wrong)}")
    _check_env_names(problems, table, where)
    return {key: item for key, item in table.items() if isinstance(item, str)}


def _check_env_names(problems: _Problems, table: Mapping[str, Any], where: str) -> None:
    for key in table:
        if not ENV_NAME.fullmatch(key):
            problems.add(f"{where}.{key}", f"{key!r} is not an environment variable name ({ENV_NAME.pattern})",
                         near=where.rsplit(".", 1)[-1])


def _runtime_env(problems: _Problems, value: Any) -> dict[str, str]:
    """[runtime] env: strings, or numbers written as TOML numbers (TP_SIZE = 4)."""
    table = problems.table(value, "runtime.env", near="env")
    _check_env_names(problems, table, "runtime.env")
    env = {}
    for key, item in table.items():
        if isinstance(item, str) or (isinstance(item, int | float) and not isinstance(item, bool)):
            env[key] = str(item)
        else:
            problems.add(f"runtime.env.{key}", f"must be a string or a number, not {_toml_type(item)}", near="env")
    return env


def _git_url_problem(url: str) -> str:
    """Why `url` cannot be handed to `git fetch` ("" when it can)."""
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)(://|::)", url)
    if url.startswith("-"):
        return f"{url!r} starts with '-': git would read it as an option"
    if any(ord(char) < 32 or ord(char) == 127 for char in url):
        return f"{url!r} contains a control character"
    if scheme and (scheme[2] == "::" or scheme[1].lower() not in GIT_SCHEMES):
        return f"{url!r}: use a {', '.join(GIT_SCHEMES)} URL, host:path or a path"
    return ""


def _parse_upstream(problems: _Problems, value: Any) -> Upstream:
    raw = problems.table(value, "upstream")
    named = ("name", "version", "package_root")
    fields = problems.fields(raw, "upstream", "upstream", required=named, near=dict.fromkeys(named, "upstream"))
    source = fields["source"]
    if fields["version"] and not is_version_name(fields["version"]):
        problems.add("upstream.version", f"{fields['version']!r}: {VERSION_RULE}", near="version")
    if source not in UPSTREAM_SOURCES:
        problems.add("upstream.source", f"must be one of {UPSTREAM_SOURCES}, not {source!r}")
    git = None
    if "git" in raw:
        table = problems.table(raw["git"], "upstream.git", near="git")
        git = GitPin(**problems.fields(table, "upstream.git", "upstream.git"))
        if _git_url_problem(git.url):
            problems.add("upstream.git.url", _git_url_problem(git.url), near="url")
        if git.ref and (git.ref.startswith("-") or not re.fullmatch(r"[\w./+-]+", git.ref)):
            problems.add("upstream.git.ref", f"{git.ref!r} is not a git ref name", near="ref")
        if git.commit and not COMMIT_ID.fullmatch(git.commit):
            problems.add("upstream.git.commit", f"{git.commit!r} is not a full commit id (40 or 64 lowercase hex "
                                                "digits)", near="commit")
    root = fields["package_root"]
    if root and (root.startswith("/") or root.startswith("\\") or any(part in ("..", ".git") for part in
                                                                       re.split(r"[/\\]", root))):
        # check and apply extract the release wheel's packages under it: it stays inside the tree
        problems.add("upstream.package_root", f"{root!r} is not a relative path inside the tree (no leading /, "
                     "no .., no .git)", near="package_root")
    wheels = _parse_wheels(problems, raw.get("wheels", []), name=fields["name"], version=fields["version"])
    if source == "wheel" and not wheels and not problems.has("upstream.wheels"):
        problems.add("upstream.wheels", "source = 'wheel' needs at least one [[upstream.wheels]] pin", near="upstream")
    if source == "git" and not (git and git.url and git.commit):
        problems.add("upstream.git", "source = 'git' needs url and commit", near="upstream")
    empty_dirs = _string_list(problems, raw.get("empty_dirs", []), "upstream.empty_dirs")
    for directory in empty_dirs:
        parts = directory.split("/")
        if not directory or directory.startswith("/") or any(part in ("", ".", "..", ".git") for part in parts):
            problems.add("upstream.empty_dirs", f"{directory!r} is not a relative path inside the tree", near="empty_dirs")
    return Upstream(**fields, git=git, wheels=tuple(wheels), empty_dirs=empty_dirs)


def _parse_wheels(problems: _Problems, value: Any, *, name: str, version: str) -> list[WheelPin]:
    wheels: list[WheelPin] = []
    pinned: dict[tuple[str, str | None], int] = {}
    for index, pin in enumerate(problems.tables(value, "upstream.wheels", near="wheels")):
        where = f"upstream.wheels[{index}]"
        if pin is None:
            continue
        fields = problems.fields(pin, "upstream.wheels", where, required=("python_tag", "filename"))
        tag, filename = fields["python_tag"], fields["filename"]
        _check_file_pin(problems, fields, where)
        platform = platform_of_tags(filename)
        if filename and not platform and not problems.has(f"{where}.filename"):
            problems.add(f"{where}.filename", f"{filename!r} is not a Linux {' or '.join(PLATFORMS.values())} wheel "
                         "(its platform tag names no build platform)", near=filename)
        if filename and not problems.has(f"{where}.filename"):
            _check_wheel_names(problems, fields, where, name=name, version=version)
        if (tag, platform) in pinned:
            # wheel_for() would silently take the first: two pins for one tag and platform are a mistake.
            problems.add(f"{where}.python_tag", f"{tag!r} on {platform} is pinned already by "
                         f"upstream.wheels[{pinned[tag, platform]}]", near="python_tag")
        elif tag:
            pinned[tag, platform] = index
        wheels.append(WheelPin(**fields))
    return wheels


def is_version_name(version: str) -> bool:
    """Whether `version` may name upstream: a cache tag (upstream/<version>+…) and report files."""
    return bool(VERSION_NAME.fullmatch(version)) and ".." not in version and not version.endswith((".", ".lock"))


def _check_wheel_names(problems: _Problems, fields: Mapping[str, str], where: str, *, name: str, version: str) -> None:
    """A pin's file is [upstream]'s release for its python_tag: the built wheels take their name and
    version from [upstream] and their tags from the file (a 0.5.23 wheel pinned under version 0.5.22
    was built as sglang-0.5.22+tp4)."""
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

    filename, python_tag = fields["filename"], fields["python_tag"]
    try:
        project, release, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename as error:
        problems.add(f"{where}.filename", str(error), near=filename)
        return
    if name and canonicalize_name(project) != canonicalize_name(name):
        problems.add(f"{where}.filename", f"{filename!r} is a wheel of {project}, not of upstream.name {name!r}",
                     near=filename)
    if version and str(release) != version:
        problems.add(f"{where}.filename", f"{filename!r} is release {release}, not upstream.version {version!r}",
                     near=filename)
    interpreters = {tag.interpreter for tag in tags}
    generic = f"py{python_tag[2:3]}"  # a pure py3 wheel serves cp311 and cp312 alike
    if python_tag and python_tag not in interpreters and generic not in interpreters:
        problems.add(f"{where}.python_tag", f"{python_tag!r} is not the file's Python tag ({', '.join(sorted(interpreters))})",
                     near="python_tag")


def _check_file_pin(problems: _Problems, fields: Mapping[str, str], where: str) -> None:
    filename, sha256 = fields["filename"], fields["sha256"]
    if filename and Path(filename).name != filename:
        problems.add(f"{where}.filename", f"{filename!r} must be a plain file name", near=filename)
    elif filename and not re.fullmatch(r"[A-Za-z0-9_.]+-[A-Za-z0-9_.!+]+(-[A-Za-z0-9_.]+){3,4}\.whl", filename):
        problems.add(f"{where}.filename", f"{filename!r} is not a wheel file name", near=filename)
    if not re.fullmatch(r"[0-9a-f]{64}", sha256) and not problems.has(f"{where}.sha256"):
        problems.add(f"{where}.sha256", "must be 64 lowercase hex digits", near="sha256")


def _parse_packages(problems: _Problems, value: Any) -> tuple[PackagePin, ...]:
    packages = []
    for index, table in enumerate(problems.tables(value, "runtime.packages", near="packages")):
        where = f"runtime.packages[{index}]"
        if table is None:
            continue
        fields = problems.fields(table, "runtime.packages", where, required=("filename",))
        _check_file_pin(problems, fields, where)
        if fields["filename"].endswith(".whl") and not fields["filename"].endswith("-none-any.whl"):
            # The same file goes into every platform's image.
            problems.add(f"{where}.filename", f"{fields['filename']!r} is not a pure wheel (…-none-any.whl)",
                         near=fields["filename"])
        packages.append(PackagePin(**fields))
    return tuple(packages)


def _parse_guard(problems: _Problems, raw: Mapping[str, Any] | None, *, feature: str, where: str) -> Guard | None:
    if raw is None:
        return None
    env = raw["env"] if isinstance(raw.get("env"), str) else ""
    fields = problems.fields(raw, "features.*.guards", where, near={"env": "guards", "type": env or "guards",
                                                                     "description": env})
    guard_type = fields["type"]
    if problems.has(f"{where}.env") or problems.has(f"{where}.type"):
        return None
    if not GUARD_NAME.fullmatch(env):
        problems.add(f"{where}.env", f"{env!r}: a guard variable is {GUARD_PREFIX} and upper-case words of letters "
                                     "and digits joined by _", near=env or "guards")
    if guard_type not in GUARD_TYPES:
        problems.add(f"{where}.type", f"{guard_type!r} is not one of {GUARD_TYPES}", near=env or "guards")
    default = raw.get("default")
    if not isinstance(default, str):
        problems.add(f"{where}.default", "is required, as a string (the env value)", near=env or "guards")
        default = ""
    elif guard_type in GUARD_TYPES:
        try:
            check_value(guard_type, default)
        except ValueError as error:
            problems.add(f"{where}.default", str(error), near=env)
    return Guard(**fields, default=default, feature=feature)


def _parse_features(problems: _Problems, value: Any) -> dict[str, Feature]:
    features = {}
    for name, item in problems.table(value, "features").items():
        where = f"features.{name}"
        table = problems.table(item, where, near=f"features.{name}")
        description = problems.fields(table, "features.*", where)["description"]
        if not FEATURE_NAME.fullmatch(name):
            problems.add(where, f"{name!r} is not a feature name (lower-case letters, digits and _, starting with "
                                "a letter)", near=f"features.{name}")
        guards = [_parse_guard(problems, guard, feature=name, where=f"{where}.guards[{index}]")
                  for index, guard in enumerate(problems.tables(table.get("guards", []), f"{where}.guards",
                                                                near="guards"))]
        features[name] = Feature(
            name=name,
            description=description,
            requires=_string_list(problems, table.get("requires", []), f"{where}.requires"),
            conflicts=_string_list(problems, table.get("conflicts", []), f"{where}.conflicts"),
            guards=tuple(guard for guard in guards if guard),
            ported=ported if isinstance(ported := table.get("ported", True), bool) else True,
        )
        if not isinstance(ported, bool):
            problems.add(f"{where}.ported", f"must be true or false, not {_toml_type(ported)}")
    return features


def _parse_patches(problems: _Problems, value: Any, patches_dir: Path) -> list[PatchEntry]:
    entries = []
    for index, table in enumerate(problems.tables(value, "patches", near="patches")):
        where = f"patches[{index}]"
        if table is None:
            continue
        file = table["file"] if isinstance(table.get("file"), str) else ""
        fields = problems.fields(table, "patches", where, near={"upstream": file, "unguarded": file})
        if problems.has(f"{where}.file"):
            continue  # not a string: nothing to check the file of
        if not file or Path(file).name != file or not file.isprintable():
            problems.add(f"{where}.file", f"{file!r} must be a plain file name inside patches/ (printable: no "
                         "control characters)", near=file or "patches")
        status = fields.pop("upstream")
        if status not in UPSTREAM_STATUSES:
            problems.add(f"{where}.upstream", f"{status!r} is not one of {UPSTREAM_STATUSES}", near=file)
        entries.append(PatchEntry(**fields, path=patches_dir / file, upstream_status=status))
    return entries


def _parse_variants(problems: _Problems, value: Any, upstream: Upstream) -> dict[str, Variant]:
    variants = {}
    for name, item in problems.table(value, "variants").items():
        where = f"variants.{name}"
        table = problems.table(item, where, near=f"variants.{name}")
        if not VARIANT_NAME.fullmatch(name):
            problems.add(where, f"{name!r} is not a variant name (at most 64 characters: letters and digits, one '.', "
                                "'_' or '-' between two of them: it becomes part of wheel versions and image tags)", near="variants")
        named = _string_list(problems, table["platforms"], f"{where}.platforms") if "platforms" in table else ()
        for platform in named:
            if platform not in PLATFORMS:
                problems.add(f"{where}.platforms", f"unknown platform {platform!r}{near_miss(platform, PLATFORMS)} "
                             f"(one of {', '.join(PLATFORMS)})", near="platforms")
            elif upstream.source == "wheel" and platform not in upstream.platforms \
                    and ANY_PLATFORM not in upstream.platforms:
                problems.add(f"{where}.platforms", f"{platform}: no [[upstream.wheels]] pin for it (pinned: "
                             f"{', '.join(upstream.platforms) or 'none'})", near="platforms")
        if "platforms" in table and not named and not problems.has(f"{where}.platforms"):
            problems.add(f"{where}.platforms", "names no platform: leave the key out for every pinned one",
                         near="platforms")
        variants[name] = Variant(name=name, description=problems.fields(table, "variants.*", where)["description"],
                                 features=_string_list(problems, table.get("features", []), f"{where}.features"),
                                 env=MappingProxyType(_string_table(problems, table.get("env", {}), f"{where}.env")),
                                 platforms=tuple(dict.fromkeys(named or upstream.platforms)))
    return variants


def unknown(name: str, known: Iterable[str], kind: str = "feature") -> str:
    """"unknown variant 'x'", with the closest known name, or else the known ones (up to 20)."""
    known = sorted(known)
    listed = f" (known: {', '.join(known)})" if 0 < len(known) <= 20 else ""
    return f"unknown {kind} {name!r}{near_miss(name, known) or listed}"


def _check_references(problems: _Problems, series: Series) -> None:
    features = series.features
    for name, feature in features.items():
        for relation in ("requires", "conflicts"):
            for other in getattr(feature, relation):
                if other not in features:
                    problems.add(f"features.{name}.{relation}", unknown(other, features), near=other)
    try:
        graphlib.TopologicalSorter({name: [other for other in feature.requires if other in features]
                                    for name, feature in features.items()}).prepare()
    except graphlib.CycleError as error:
        problems.add(f"features.{error.args[1][0]}.requires", "cycle: " + " -> ".join(error.args[1]))
    if series.default_variant not in series.variants and not problems.has("series.default_variant"):
        problems.add("series.default_variant", unknown(series.default_variant, series.variants, "variant"))
    if series.patches_dir.is_symlink():  # the series writer would write (and a rebase restore) files where it points
        problems.add("patches", f"{series.patches_dir} is a symbolic link: patches/ is a directory of the series' own")
    seen: dict[str, int] = {}
    for index, entry in enumerate(series.patches):
        if entry.feature not in features and not problems.has(f"patches[{index}].feature"):
            problems.add(f"patches[{index}].feature", unknown(entry.feature, features), near=entry.file)
        elif entry.feature in features and not features[entry.feature].ported:
            problems.add(f"patches[{index}].feature", f"feature {entry.feature!r} is marked `ported = false`: "
                         "remove the marker now that a patch implements it", near=entry.file)
        if entry.file in seen:
            problems.add(f"patches[{index}].file", f"{entry.file} is already listed as patches[{seen[entry.file]}]", near=entry.file)
        seen.setdefault(entry.file, index)
        if entry.file and entry.path.is_symlink():
            # Its target (any file the user can read) would be read as the patch.
            problems.add(f"patches[{index}].file", f"patches/{entry.file} is a symbolic link: a patch is a regular "
                         "file in patches/ (copy it there)", near=entry.file)
        elif entry.file and not entry.path.is_file():
            what = "is not a regular file" if entry.path.exists() else "does not exist"
            problems.add(f"patches[{index}].file", f"patches/{entry.file} {what}", near=entry.file)
    # An entry skipped for a wrong type may be the one listing a file: say nothing then.
    if series.patches_dir.is_dir() and not problems.has_matching(r"patches\[\d+\]\.file"):
        for path in sorted(series.patches_dir.glob("*.patch")):
            if path.name not in seen:
                problems.add("patches", f"patches/{path.name} is not listed in series.toml (add a [[patches]] entry or delete it)")


def _check_guards(problems: _Problems, series: Series) -> None:
    guard_owner: dict[str, Guard] = {}  # the first declaration
    for declared in series.all_guards():
        if first := guard_owner.get(declared.env):
            problems.add(f"features.{declared.feature}.guards", f"{declared.env} is declared already by "
                         + ("this feature" if first.feature == declared.feature else f"feature {first.feature}"),
                         near=declared.env)
        guard_owner.setdefault(declared.env, declared)
    for name, variant in series.variants.items():
        chosen = set(variant.features)
        for feature_name in variant.features:
            feature = series.features.get(feature_name)
            if feature is None:
                problems.add(f"variants.{name}.features", unknown(feature_name, series.features),
                             near=f"variants.{name}")
                continue
            wrong = [f"{feature_name} is marked `ported = false` (no patch on this upstream): leave it out of "
                     "the variant"] if not feature.ported else []
            wrong += [f"{feature_name} requires {needed}, which the variant leaves out"
                      for needed in feature.requires if needed not in chosen]
            wrong += [f"{feature_name} conflicts with {other}; a variant holds one of them"
                      for other in feature.conflicts if other in chosen]
            for message in wrong:
                problems.add(f"variants.{name}.features", message, near=f"variants.{name}")
        for env, value in variant.env.items():
            guard = guard_owner.get(env)
            if guard is None:
                # A guard skipped for a wrong type may be the one declaring it: say nothing then.
                if (env.startswith(GUARD_PREFIX) and env not in series.runtime_env
                        and not problems.has_matching(r"features\.[^.]+\.guards.*")):
                    problems.add(f"variants.{name}.env.{env}", f"not the guard of any feature{near_miss(env, guard_owner)}", near=env)
                continue
            if guard.feature not in chosen:
                problems.add(f"variants.{name}.env.{env}", f"guard of {guard.feature}, which variant {name} leaves out", near=env)
            try:
                check_value(guard.type, value)
            except ValueError as error:
                problems.add(f"variants.{name}.env.{env}", str(error), near=env)


def _parse_hazards(problems: _Problems, value: Any, series: Series) -> tuple[Hazard, ...]:
    guards = {guard.env: guard for guard in series.all_guards()}
    hazards = []
    for index, table in enumerate(problems.tables(value, "hazards", near="hazards")):
        where = f"hazards[{index}]"
        if table is None:
            continue
        fields = problems.fields(table, "hazards", where, required=("name", "reason"))
        if fields["name"] and not re.fullmatch(r"[a-z0-9][a-z0-9-]*", fields["name"]):
            problems.add(f"{where}.name", f"{fields['name']!r}: lower-case letters, digits and -", near=fields["name"])
        variants = _string_list(problems, table.get("variants", []), f"{where}.variants")
        for name in variants:
            if name not in series.variants:
                problems.add(f"{where}.variants", unknown(name, series.variants, "variant"), near=name)
        when = _string_table(problems, table.get("when", {}), f"{where}.when")
        if not when and not problems.has(f"{where}.when"):
            problems.add(f"{where}.when", "names no guard value: a hazard is a combination of guard values",
                         near=fields["name"] or "hazards")
        for env, wanted in when.items():
            if env not in guards:
                problems.add(f"{where}.when.{env}", f"not a guard{near_miss(env, guards)}", near=env)
                continue
            try:
                check_value(guards[env].type, wanted)
            except ValueError as error:
                problems.add(f"{where}.when.{env}", str(error), near=env)
        hazards.append(Hazard(name=fields["name"], reason=fields["reason"], when=MappingProxyType(when),
                              variants=variants))
    return tuple(hazards)


def parse_series(text: str, *, path: Path) -> Series:
    problems = _Problems(text)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError([f"not valid TOML: {error}"], source=str(path)) from error
    except RecursionError:
        raise ConfigError(["not valid TOML: nested too deeply"], source=str(path)) from None
    problems.fields(raw, "", "")
    meta = problems.fields(problems.table(raw.get("series", {}), "series"), "series", "series")
    runtime = problems.table(raw.get("runtime", {}), "runtime")
    problems.fields(runtime, "runtime", "runtime")
    if "upstream" not in raw:
        problems.add("upstream", "the [upstream] table is required")
    guards_module = meta["guards_module"]
    if guards_module and not all(part.isidentifier() for part in guards_module.split(".")):
        problems.add("series.guards_module", f"{guards_module!r} is not a dotted Python module name "
                     "(e.g. pkg.sub.module)", near="guards_module")
    upstream = _parse_upstream(problems, raw.get("upstream", {}))
    series = Series(
        path=path,
        name=meta["name"] or path.parent.name,
        default_variant=meta["default_variant"],
        upstream=upstream,
        features=MappingProxyType(_parse_features(problems, raw.get("features", {}))),
        patches=tuple(_parse_patches(problems, raw.get("patches", []), path.parent / "patches")),
        variants=MappingProxyType(_parse_variants(problems, raw.get("variants", {}), upstream)),
        runtime_env=MappingProxyType(_runtime_env(problems, runtime.get("env", {}))),
        packages=_parse_packages(problems, runtime.get("packages", [])),
        guards_module=guards_module if not problems.has("series.guards_module") else "",
    )
    _check_references(problems, series)
    _check_guards(problems, series)
    if "hazards" in raw:
        series = dataclasses.replace(series, hazards=_parse_hazards(problems, raw["hazards"], series))
    if problems.items:
        raise ConfigError(problems.items, source=str(path))
    return series


def load_series(path: Path) -> Series:
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as error:
        raise ConfigError([f"cannot read: {error.strerror}"], source=str(path)) from error
    except UnicodeDecodeError as error:
        line = path.read_bytes()[:error.start].count(b"\n") + 1
        raise ConfigError([f"line {line}: not UTF-8 (byte {error.object[error.start]:#04x}); TOML files are UTF-8"],
                          source=str(path)) from None
    return parse_series(text, path=path.resolve())
