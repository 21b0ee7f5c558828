"""The command line and its main job: a LLaMA-style block compiled with stock
max-autotune and with us, side by side (``main``, ``run``)."""
