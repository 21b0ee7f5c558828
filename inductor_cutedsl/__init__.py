"""inductor_cutedsl: CuTe DSL GEMMs for TorchInductor on Hopper."""
__version__ = "0.1.0"
