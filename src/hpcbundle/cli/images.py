"""`hpcbundle build-docker`: render a recipe and build the image with a Docker engine (Docker SDK)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import IO, Any

import click

from ..config.errors import UserError
from ..image import docker_client
from ..image.blocks.frameworks import framework_requirements
from ..image.render import render_image, template_environment
from ..image.spec import CONTEXT_DIRS
from ..knowledge.compat import knowledge_base
from ..rules.engine import failed
from ..rules.facts import check_declared
from ..rules.loading import load_recipe
from . import main, pass_bundle
from .recipes import refuse

# Requirements with a local version label (torch==2.13.0+cpu) are never on PyPI.
_LOCAL_BUILD = re.compile(r"^([A-Za-z0-9_.-]+)==([^+\s]+\+[A-Za-z0-9.]+)$")


@main.command("build-docker")
@click.argument("recipe")
@click.option(
    "-t",
    "--tag",
    "tags",
    multiple=True,
    help="Name for the image (repeatable). Default: hpcbundle/RECIPE:latest, or hpcbundle/RECIPE:TARGET with --target.",
)
@click.option(
    "--base-image",
    metavar="IMAGE",
    help="Start both stages FROM this image instead of the recipe's (same OS), e.g. a "
    "locally imported local/debian:bookworm; sent as BUILD_IMAGE and RUNTIME_IMAGE.",
)
@click.option(
    "--wheelhouse",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Directory sent as the build context's wheelhouse/ (wheels pip prefers, the "
    "Horovod sdist, source tarballs). Default: the bundle's wheelhouse/.",
)
@click.option("--target", metavar="STAGE", help="Stop after this stage, e.g. `build` (to measure it).")
@click.option(
    "--build-arg",
    "build_args",
    multiple=True,
    metavar="KEY=VALUE",
    help="More build arguments, e.g. PIP_NO_INDEX=1 (offline) or PIP_EXTRA_INDEX_URL=URL.",
)
@click.option("--network", metavar="MODE", help="Network of the RUN steps, as `docker build --network` (e.g. host).")
@click.option("--no-cache", is_flag=True, help="Do not reuse cached layers.")
@click.option("-q", "--quiet", is_flag=True, help="Do not stream the build log (it is still shown on failure).")
@pass_bundle
def build_docker_command(
    bundle,
    recipe: str,
    tags: tuple[str, ...],
    base_image: str | None,
    wheelhouse: Path | None,
    target: str | None,
    build_args: tuple[str, ...],
    network: str | None,
    no_cache: bool,
    quiet: bool,
) -> None:
    """Render RECIPE as a Dockerfile and build it with the Docker engine DOCKER_HOST names.

    The Dockerfile is built exactly as rendered; the build context holds only what it COPYs
    (the bundle's examples/ and the wheelhouse). The engine's build log streams to stderr;
    the image's name, id, size, largest layers and labels go to stdout.

    \b
    Examples:
      make wheelhouse      # torch+cpu wheels are not on PyPI
      hpcbundle build-docker cpu-local
      hpcbundle build-docker cpu-local --base-image local/debian:bookworm --network host
      hpcbundle build-docker cpu-local --target build -t hpcbundle/cpu-local:build
    """
    b = bundle.get()
    kb = knowledge_base()
    model = load_recipe(recipe, b.recipes_dir)
    findings = check_declared(model, None, kb)
    if failed(findings):
        refuse(findings, model.name)
    text = render_image(model, "docker", template_environment(b.containers_dir), kb)

    args = _build_args(text, base_image, build_args)
    wheels = wheelhouse or b.root / "wheelhouse"
    _check_wheelhouse(framework_requirements(model, kb), wheels, args)
    directories = {"examples": b.examples_dir, "wheelhouse": wheels}
    assert set(directories) == set(CONTEXT_DIRS), "build context out of step with image.spec.CONTEXT_DIRS"

    tags = tags or (f"hpcbundle/{model.name}:{target or 'latest'}",)
    client = docker_client.connect()
    context = docker_client.build_context(text, directories)
    click.echo(
        f"building {tags[0]} from recipe {model.name}"
        + (f" (stage {target})" if target else "")
        + (f" FROM {base_image}" if base_image else ""),
        err=True,
    )
    t0 = time.monotonic()
    try:
        info = _build(client, context, tags[0], quiet, target, args, network, no_cache)
    finally:
        context.close()
    for extra in tags[1:]:
        info = docker_client.tag(client, info.id, extra)
    click.echo(describe(info, tags, time.monotonic() - t0))


def _build(
    client: Any,
    context: IO[bytes],
    tag: str,
    quiet: bool,
    target: str | None,
    args: dict[str, str],
    network: str | None,
    no_cache: bool,
) -> docker_client.ImageInfo:
    """Build `context` as `tag` (up to stage `target`), the engine's log streamed to stderr unless `quiet`;
    a failed build prints the engine's reason (and, when quiet, the log's tail) and exits 1."""
    try:
        return docker_client.build(
            client,
            context,
            tag=tag,
            target=target,
            buildargs=args,
            network_mode=network,
            nocache=no_cache,
            progress=None if quiet else lambda line: click.echo(line, nl=False, err=True),
        )
    except docker_client.BuildFailed as exc:
        if quiet:
            click.echo(exc.tail(), err=True)
        click.echo(f"hpcbundle: error: {exc.message}", err=True)
        raise SystemExit(1) from None


def _build_args(text: str, base_image: str | None, pairs: tuple[str, ...]) -> dict[str, str]:
    """The build arguments: --build-arg's KEY=VALUE pairs, and with --base-image the two FROM images
    (refused when the rendered Dockerfile `text` declares no such ARGs)."""
    args = _parse_build_args(pairs)
    if not base_image:
        return args
    missing = [a for a in ("BUILD_IMAGE", "RUNTIME_IMAGE") if not re.search(rf"^ARG {a}\b", text, re.M)]
    if missing:
        raise UserError.at(
            "containers/docker/Dockerfile.j2",
            "",
            f"declares no ARG {', '.join(missing)}",
            "--base-image needs both ARGs before the FROMs; drop --base-image or fix the template",
        )
    return {"BUILD_IMAGE": base_image, "RUNTIME_IMAGE": base_image, **args}


def _parse_build_args(pairs: tuple[str, ...]) -> dict[str, str]:
    args = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError.at("--build-arg", pair, "is not KEY=VALUE", "e.g. --build-arg PIP_NO_INDEX=1")
        args[key] = value
    return args


def _check_wheelhouse(requirements: tuple[str, ...], wheelhouse: Path, args: dict[str, str]) -> None:
    """Refuse early (not 10 minutes into the build) when a wheel no index serves is missing."""
    if args.get("PIP_EXTRA_INDEX_URL"):
        return
    for requirement in requirements:
        m = _LOCAL_BUILD.match(requirement)
        if m is None:
            continue
        name, version = m.group(1).replace("-", "_"), m.group(2)
        if not any(wheelhouse.glob(f"{name}-{version}-*.whl")):
            raise UserError.at(
                str(wheelhouse),
                "",
                f"no {name}-{version} wheel (PyPI does not serve {requirement})",
                "run `make wheelhouse`, pass --wheelhouse DIR, or --build-arg PIP_EXTRA_INDEX_URL=URL",
            )


def describe(info: docker_client.ImageInfo, tags: tuple[str, ...], seconds: float | None = None) -> str:
    """What was built, for people: names, id, size, the largest layers, the labels."""
    took = f" in {seconds:.0f} s" if seconds is not None else ""
    lines = [
        f"built {', '.join(tags)}  {info.short_id}  {docker_client.format_size(info.size)}, {info.layers} layers{took}"
    ]
    largest = sorted((h for h in info.history if h.get("Size")), key=lambda h: -h["Size"])[:5]
    if largest:
        lines.append("largest layers:")
        for h in largest:
            step = " ".join(h.get("CreatedBy", "").split())
            step = re.sub(r"^/bin/\S*sh( -\S+| pipefail)* -c (#\(nop\) )?", "", step)
            lines.append(f"  {docker_client.format_size(h['Size']):>9}  {step[:100] or '(base image)'}")
    lines.append("labels:" if info.labels else "labels: (none)")
    lines += [f"  {key}={value}" for key, value in sorted(info.labels.items())]
    return "\n".join(lines)
