"""The main job: a LLaMA-style block compiled with stock max-autotune and with us."""
