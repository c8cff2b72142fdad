"""Protocol buffer schemas and the code generated from them (run scripts/gen-proto)."""
