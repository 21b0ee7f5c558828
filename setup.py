from setuptools import find_packages, setup

setup(
    name="inductor-cutedsl",
    version="0.1.0",
    description="CuTe DSL GEMMs with fused epilogues for TorchInductor on Hopper",
    packages=find_packages(include=["inductor_cutedsl", "inductor_cutedsl.*"]),
    python_requires=">=3.10",
    install_requires=[
        # The GPU machine runs torch 2.11: CI imports the same release.
        "torch==2.11.*",
        "nvidia-cutlass-dsl[cu13]==4.8.1",
        "sympy",
        "filelock",
        "matplotlib",  # the main job's plot
    ],
    extras_require={"test": ["pytest", "pytest-xdist"]},
    entry_points={"console_scripts": ["inductor-cutedsl=inductor_cutedsl.__main__:main"]},
)
