"""cocotb benches of the mesh and the router (and the HDL traffic bench of fdpu noc-bench)."""
