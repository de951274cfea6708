"""masterd's jobs: opcodes (Ganeti's OP_IDs and fields), the job queue, its etcd storage."""
