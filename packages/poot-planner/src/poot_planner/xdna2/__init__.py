"""The XDNA2 layout, xdna2's ``Target.layout`` (``layout``): value facts (``facts``), fused row
groups (``rowfusion``), one tile per equation (``tiles``), chunking through tile memory
(``chunking``), regions with their host relayouts (``regions``), and programs that meet each
region bound exactly (``probes``)."""
