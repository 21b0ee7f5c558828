from setuptools import find_packages, setup

setup(
    name="inductor-cutedsl",
    version="0.1.0",
    description="CuTe DSL GEMMs with fused epilogues for TorchInductor on Hopper",
    packages=find_packages(include=["inductor_cutedsl", "inductor_cutedsl.*"]),
    python_requires=">=3.10",
    install_requires=[
        # The releases whose Inductor this package is written against (``_compat.py``
        # checks the same range at import): a range, so that installing keeps the
        # user's torch. CI tests both ends.
        "torch>=2.11,<2.16",
        "nvidia-cutlass-dsl[cu13]==4.8.1",
        "sympy",
        # A kernel cache lock file is removed by its holder (runtime/cache.py): filelock
        # retries a lock taken on a removed file from 3.21 on.
        "filelock>=3.21",
        "matplotlib",  # the main job's plot
    ],
    extras_require={"test": ["pytest", "pytest-xdist"]},
    entry_points={"console_scripts": ["inductor-cutedsl=inductor_cutedsl.__main__:main"]},
)
