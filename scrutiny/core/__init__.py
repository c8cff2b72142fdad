"""The pure core: BookKeeper's data model and formats, entry sets and the verdict. No I/O, no clocks."""
