"""Jobs: opcodes (Ganeti's OP_IDs and fields), reason trails, and the persistent job queue."""
