"""cocotb bench of the DMA (hw.dma) with the external memory model and Dbufs/Cbufs."""
