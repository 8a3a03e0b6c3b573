"""Check the Python packages of one environment against pinned versions (stdlib only).

Run with the interpreter of the environment to check; the Dockerfile runs it in NeMo-RL's
driver environment and in its vLLM and Megatron worker environments, so a base image that is
not the pinned stack fails the build instead of a 70B job:

    /opt/nemo_rl_venv/bin/python containers/verify_stack.py --python 3.12 --torch-cuda 12.8 \
        torch==2.7.1 ray==2.46.0 megatron-core   # NAME==VERSION, or NAME: installed at all

    .../python containers/verify_stack.py --satisfies "darling-nemo[judges,eval]"

Versions compare on the public part (2.7.1+cu128 matches torch==2.7.1). --satisfies checks
every requirement of an installed distribution (with extras) against what is installed.
Nothing is imported except torch for --torch-cuda (and `packaging`, which NeMo-RL ships, for
--satisfies), so it runs on a build machine without a GPU.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import sys
from collections.abc import Sequence


def check(requirements: Sequence[str]) -> list[str]:
    """One line per problem: a missing distribution or a version that differs from the pin."""
    problems = []
    for requirement in requirements:
        name, _, wanted = requirement.partition("==")
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            problems.append(f"{name}: not installed (wanted {wanted or 'any version'})")
            continue
        public = installed.split("+", 1)[0]
        if wanted and public != wanted:
            problems.append(f"{name}: {installed} installed, pinned {wanted}")
        else:
            print(f"  ok  {name} {installed}")
    return problems


def unsatisfied(dist_with_extras: str) -> list[str]:
    """Requirements of an installed distribution (and the named extras) that are not met."""
    from packaging.requirements import Requirement

    wanted = Requirement(dist_with_extras)
    problems = []
    for line in metadata.requires(wanted.name) or []:
        req = Requirement(line)
        if req.name == wanted.name:  # self-references such as darling-nemo[judges]
            continue
        in_scope = [{"extra": e} for e in wanted.extras] or [{"extra": ""}]
        if req.marker and not any(req.marker.evaluate(env) for env in in_scope):
            continue
        try:
            installed = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            problems.append(f"{wanted.name} needs {req}: not installed")
            continue
        if not req.specifier.contains(installed, prereleases=True):
            problems.append(f"{wanted.name} needs {req}: {installed} installed")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("requirements", nargs="*", help="NAME==VERSION or NAME")
    parser.add_argument("--python", help="MAJOR.MINOR this interpreter must be")
    parser.add_argument("--torch-cuda", help="CUDA version torch must be built for (12.8)")
    parser.add_argument("--satisfies", help="DIST[extra,...] whose requirements must be met")
    args = parser.parse_args(argv)
    print(f"checking {sys.executable}")
    problems = check(args.requirements)
    if args.python:
        have = f"{sys.version_info.major}.{sys.version_info.minor}"
        if have != args.python:
            problems.append(f"python: {have}, pinned {args.python}")
    if args.torch_cuda:
        import torch  # only here: the other checks must not need it

        if (torch.version.cuda or "") != args.torch_cuda:
            problems.append(f"torch built for CUDA {torch.version.cuda}, pinned {args.torch_cuda}")
    if args.satisfies:
        problems += unsatisfied(args.satisfies)
    for problem in problems:
        print(f"  MISMATCH  {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
