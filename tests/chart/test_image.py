"""The Dockerfile cannot be built here (no container engine), so check what
can be checked without one: every path it copies exists and survives
.dockerignore, everything `cargo build -p toolgate` reads at compile time is
inside the copied paths, and the runtime stage is non-root with the
entrypoint and image the chart expects.
"""
from __future__ import annotations

import fnmatch
import pathlib
import re
import shlex

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def instructions() -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", DOCKERFILE)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def build_context_sources() -> list[str]:
    sources = []
    for word, rest in instructions():
        if word != "COPY":
            continue
        args = shlex.split(rest)
        if any(a.startswith("--from") for a in args):
            continue
        args = [a for a in args if not a.startswith("--")]
        sources.extend(args[:-1])
    return sources


def _pattern_regex(pattern: str) -> str:
    """Docker's .dockerignore matching: Go filepath.Match plus `**`."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return out


def ignored(path: str) -> bool:
    """Whether .dockerignore keeps `path` out of the build context: a
    pattern applies when it matches the path or a directory above it; the
    last pattern that applies wins, `!` re-includes."""
    rel = pathlib.PurePosixPath(path.rstrip("/"))
    candidates = [str(rel)] + [str(p) for p in rel.parents if str(p) != "."]
    verdict = False
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        regex = _pattern_regex(pattern.lstrip("!").rstrip("/"))
        if any(re.fullmatch(regex, c) for c in candidates):
            verdict = not negate
    return verdict


def test_every_copied_path_exists_and_is_in_the_context():
    sources = build_context_sources()
    assert sources, "no COPY from the build context"
    for src in sources:
        assert (ROOT / src).exists(), f"Dockerfile copies {src}, which does not exist"
        assert not ignored(src), f".dockerignore excludes {src}, which the Dockerfile copies"


def test_compile_time_inputs_are_copied():
    copied = [pathlib.PurePosixPath(s.rstrip("/")) for s in build_context_sources()]

    def inside(path: pathlib.Path) -> bool:
        rel = pathlib.PurePosixPath(path.resolve().relative_to(ROOT).as_posix())
        return any(rel == c or c in rel.parents for c in copied)

    manifest = (ROOT / "Cargo.toml").read_text()
    members = re.search(r"members\s*=\s*\[(.*?)\]", manifest, re.S).group(1)
    for member in re.findall(r'"([^"]+)"', members):
        assert inside(ROOT / member), f"workspace member {member} is not copied"
    for source in (ROOT / "crates").rglob("*.rs"):
        if "target" in source.parts:
            continue
        crate_root = next(p for p in source.parents if (p / "Cargo.toml").exists())
        text = source.read_text()
        # include_str!/include_bytes! are relative to the file, sqlx::migrate! to the crate.
        embedded = [source.parent / rel for rel in re.findall(r'include_(?:str|bytes)!\(\s*"([^"]+)"', text)]
        embedded += [crate_root / rel for rel in re.findall(r'sqlx::migrate!\(\s*"([^"]+)"', text)]
        for path in embedded:
            assert path.exists(), f"{source.relative_to(ROOT)} embeds {path}, which does not exist"
            assert inside(path), f"{source.relative_to(ROOT)} embeds {path.resolve().relative_to(ROOT)}, which the image build does not copy"
            assert not ignored(path.resolve().relative_to(ROOT).as_posix()), f".dockerignore drops {path}"


def test_build_and_runtime_stages():
    froms = [rest for word, rest in instructions() if word == "FROM"]
    args = dict(
        (rest.split("=", 1) + [""])[:2] for word, rest in instructions() if word == "ARG" and "=" in rest
    )
    assert args["RUST_IMAGE"] in ("rust:1-bookworm", "rust:1-slim-bookworm")
    assert args["RUNTIME_IMAGE"] in ("gcr.io/distroless/cc-debian12:nonroot",)
    assert len(froms) == 2 and froms[0].endswith(" AS build")
    runs = " ".join(rest for word, rest in instructions() if word == "RUN")
    assert "cargo build --release --locked -p toolgate" in runs
    runtime = DOCKERFILE.split("\nFROM ${RUNTIME_IMAGE}", 1)[1]
    assert "USER 65532:65532" in runtime
    assert 'ENTRYPOINT ["/usr/local/bin/toolgate"]' in runtime
    assert "COPY --from=build /out/toolgate /usr/local/bin/toolgate" in runtime


def test_chart_points_at_the_image():
    values = yaml.safe_load((ROOT / "charts" / "toolgate" / "values.yaml").read_text())
    chart = yaml.safe_load((ROOT / "charts" / "toolgate" / "Chart.yaml").read_text())
    assert values["image"]["repository"] == "ghcr.io/toolgate/toolgate"
    assert values["image"]["tag"] == ""  # appVersion
    workspace_version = re.search(r'\[workspace\.package\][^\[]*?version\s*=\s*"([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.S)
    assert chart["appVersion"] == workspace_version.group(1), "appVersion must be the crates' version"
