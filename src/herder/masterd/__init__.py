"""masterd: the master daemon. Owns the config store and the job queue; serves Ganeti's RAPI v2."""
