"""cocotb benches of one processing element (and its microbenchmarks)."""
