"""Files baked into every sandbox image: the fork server (PID 1) and the C/C++ exit guard."""
