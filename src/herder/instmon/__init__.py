"""instmon: watch every VM from the hypervisor (libvirt's event stream), filter the events
through a configurable table and notify a recovery workflow over HTTP(S) in masakari's format
(herder's own recovery workflow is maintd). docs/instmon.md describes it."""
