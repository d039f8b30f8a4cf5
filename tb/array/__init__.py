"""cocotb bench of the PE array on the mesh (``hw.array.PeArray``), MicC and Dbufs modelled."""
