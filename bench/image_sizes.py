"""Sizes of a recipe's build stage and runtime image, side by side, and where the difference is.

    .venv/bin/python bench/image_sizes.py                 # cpu-local, private engine (as the tests)
    .venv/bin/python bench/image_sizes.py --recipe cpu-local --layers 8
    DOCKER_HOST=unix:///run/docker.sock .venv/bin/python bench/image_sizes.py --existing

By default it starts the testbed's private Docker engine (hpcbundle_testbed.docker_engine: cached
data root, debootstrapped local/debian base, wheelhouse from this machine's pip) and builds both
targets of the rendered Dockerfile through hpcbundle.image.docker_client; with a warm cache that takes seconds.
--existing only inspects hpcbundle/RECIPE:build and :latest in the engine DOCKER_HOST names.
Prints a table, the largest layers of each, and one JSON line (metric image_size_ratio).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from hpcbundle.config.bundle import Bundle
from hpcbundle.image import docker_client
from hpcbundle.image.blocks.frameworks import framework_requirements
from hpcbundle.image.render import render_image, template_environment
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.rules.loading import load_recipe

ROOT = Path(__file__).resolve().parents[1]


def build_both(recipe_name: str) -> tuple[docker_client.ImageInfo, docker_client.ImageInfo, dict[str, float]]:
    """Build `target="build"` and the runtime image with the private engine; stop it after."""
    from hpcbundle_testbed.cache import cache_dir
    from hpcbundle_testbed.docker_engine.engine import DockerEngine
    from hpcbundle_testbed.docker_engine.wheels import download_wheels

    bundle = Bundle(ROOT)
    kb = knowledge_base()
    recipe = load_recipe(recipe_name, bundle.recipes_dir)
    dockerfile = render_image(recipe, "docker", template_environment(bundle.containers_dir), kb)
    local_builds = [r for r in framework_requirements(recipe, kb) if "+" in r]
    wheelhouse = download_wheels(local_builds, cache_dir() / "wheelhouse" / recipe_name)
    seconds: dict[str, float] = {}
    with DockerEngine.cached() as engine:
        base = engine.base_image()
        args = {"BUILD_IMAGE": base.tag, "RUNTIME_IMAGE": base.tag}
        built = {}
        for target, tag in (("build", f"hpcbundle/{recipe_name}:build"), (None, f"hpcbundle/{recipe_name}:latest")):
            t0 = time.monotonic()
            with docker_client.build_context(
                dockerfile, {"examples": bundle.examples_dir, "wheelhouse": wheelhouse}
            ) as ctx:
                built[target] = docker_client.build(
                    engine.client(),
                    ctx,
                    tag=tag,
                    target=target,
                    buildargs=args,
                    network_mode="host",
                    progress=lambda s: print(s, end="", file=sys.stderr) if s.startswith("Step ") else None,
                )
            print(file=sys.stderr)
            seconds[target or "runtime"] = time.monotonic() - t0
        return built["build"], built[None], seconds


def largest_layers(info: docker_client.ImageInfo, n: int) -> list[str]:
    rows = sorted((h for h in info.history if h.get("Size")), key=lambda h: -h["Size"])[:n]
    out = []
    for h in rows:
        step = " ".join(h.get("CreatedBy", "").split())
        step = step.split(" -c ", 1)[-1].removeprefix("#(nop) ").strip()
        out.append(f"    {docker_client.format_size(h['Size']):>9}  {step[:110] or '(base image)'}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="cpu-local")
    parser.add_argument("--layers", type=int, default=5, help="largest layers to list per image")
    parser.add_argument(
        "--existing",
        action="store_true",
        help="inspect the images already in the DOCKER_HOST engine instead of building",
    )
    args = parser.parse_args()
    if args.existing:
        client = docker_client.connect()
        build = docker_client.inspect(client, f"hpcbundle/{args.recipe}:build")
        runtime = docker_client.inspect(client, f"hpcbundle/{args.recipe}:latest")
        seconds: dict[str, float] = {}
    else:
        build, runtime, seconds = build_both(args.recipe)
    ratio = runtime.size / build.size
    print(f"{'recipe ' + args.recipe:<24}{'build stage':>14}{'runtime':>14}")
    print(f"{'size':<24}{docker_client.format_size(build.size):>14}{docker_client.format_size(runtime.size):>14}")
    print(f"{'layers':<24}{build.layers:>14}{runtime.layers:>14}")
    if seconds:
        print(f"{'build time (this run)':<24}{seconds['build']:>13.0f}s{seconds['runtime']:>13.0f}s")
    print(f"runtime / build = {ratio:.2f}  (saved {docker_client.format_size(build.size - runtime.size)})")
    for name, info in (("build stage", build), ("runtime", runtime)):
        print(f"  largest layers, {name}:")
        print("\n".join(largest_layers(info, args.layers)))
    print(
        json.dumps(
            {
                "metric": "image_size_ratio",
                "recipe": args.recipe,
                "build_bytes": build.size,
                "runtime_bytes": runtime.size,
                "ratio": round(ratio, 4),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
