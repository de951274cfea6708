"""OP_INSTANCE_CREATE: place (explicit nodes, or iallocators tried in order), create the disks on
the nodes, define and install the instance, start it. Any failure after the config recorded
the instance undoes everything (disks, domain, config entry); an undo a dead node keeps from
finishing leaves the instance recorded and stopped instead of its disks unowned."""

from __future__ import annotations

import time

from herder.core import configdiff, diskobjects, model, params, verify, vmclaim
from herder.core.errors import ConfigError, HerderError, OpPrereqError
from herder.core.rpcdefs import backup_calls, disk_calls, instance_calls
from herder.core.rpcdefs.payload import instance_payload
from herder.masterd import iallocator, locking, portpool
from herder.masterd.jobs import opcodes
from herder.masterd.lu import diskgen, disks, exports, fit, nics, remote_streams
from herder.masterd.lu.base import JobResult, LockRequest, LogicalUnit, lookup
from herder.masterd.lu.common import checked_new_name, kvm_verdict_feedback
from herder.masterd.lu.placement import live_figures

MIRRORED = {"drbd"}


def _hypervisor_of(op: opcodes.OpInstanceCreate, c: model.Cluster) -> str:
    """The new instance's hypervisor: the one asked for, or the cluster's first; enabled and
    one herder's nodes can run (a cluster imported from Ganeti may have others enabled)."""
    hypervisor = op.hypervisor or (c.enabled_hypervisors[0] if c.enabled_hypervisors else None)
    if hypervisor is None or hypervisor not in c.enabled_hypervisors:
        raise OpPrereqError(f"hypervisor {hypervisor} is not enabled", "wrong_input")
    try:
        params.check_runnable_hypervisor(hypervisor)
    except ValueError as err:
        raise OpPrereqError(str(err), "wrong_input") from None
    return hypervisor


class InstanceCreate(LogicalUnit[opcodes.OpInstanceCreate]):
    # placement looks at every node; creations are serialized up to the instance's record
    # (then the BGL is shared: `execute`)
    REQ_BGL = True

    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        return []

    def check(self, config: model.ConfigData) -> None:
        op = self.op
        c = config.cluster
        self.source: model.Node | None = None
        self.source_ca: str | None = None
        if op.mode == "import":
            self._read_export(config)
        elif op.mode == "remote-import":  # the disks receive the source cluster's streams
            self.source_ca = exports.check_remote_import(
                self.env, op.instance_name, op.source_handshake, op.source_x509_ca or "")
            op.no_install = True
        op.instance_name = checked_new_name(op.instance_name, name_check=op.name_check,
                                            ip_check=op.ip_check, feedback=self.feedback)
        if any(i.name == op.instance_name for i in config.instances.values()):
            raise OpPrereqError(f"instance {op.instance_name!r} already exists",
                                "already_exists")
        if op.disk_template not in c.enabled_disk_templates:
            raise OpPrereqError(f"disk template {op.disk_template} is not enabled on the "
                                "cluster", "wrong_input")
        hypervisor = _hypervisor_of(op, c)
        if not op.os_type and not op.no_install:
            raise OpPrereqError("give the OS (os_type), or no_install")
        if op.os_type and op.os_type.split("+", 1)[0] in c.blacklisted_os:
            raise OpPrereqError(f"Guest OS '{op.os_type}' is not allowed for installation "
                                "(blacklisted)", "wrong_input")
        if op.disk_template != "diskless" and not op.disks:
            raise OpPrereqError(f"a {op.disk_template} instance needs at least one disk")
        for index, spec in enumerate(op.disks):
            if op.disk_template == "blockdev" and not spec.get("adopt"):
                raise OpPrereqError(f"disk {index}: a blockdev disk adopts an existing device:"
                                    " give adopt=/dev/disk/...", "wrong_input")
            if op.disk_template == "ext" and not spec.get("provider"):
                raise OpPrereqError(f"disk {index}: an ext disk needs its ExtStorage provider "
                                    "(provider=NAME)", "wrong_input")
            if spec.get("adopt") and op.disk_template != "blockdev":
                raise OpPrereqError(f"disk {index}: only blockdev disks can be adopted "
                                    "(adopting existing LVs is not supported)", "wrong_input")
        try:
            self.beparams = params.validate(params.BE_FAMILY, op.beparams)
            self.hvparams = params.validate(params.hv_family(hypervisor), op.hvparams,
                                            instance_level=True)
            self.sizes = [params.parse_size(d.get("size")) for d in op.disks]
            # what the instance will run with: the request meets the inherited values
            params.check_relations(params.BE_FAMILY, params.fill(c.beparams, self.beparams))
            params.check_relations(params.hv_family(hypervisor), params.fill(
                c.hvparams.get(hypervisor, {}),
                c.os_hvp.get((op.os_type or "").split("+", 1)[0], {}).get(hypervisor),
                self.hvparams))
            for nic in op.nics:
                params.check_relations(params.NIC_FAMILY, params.fill(
                    c.nicparams, {k: v for k, v in nic.items()
                                  if k in ("mode", "link", "vlan") and v}))
        except (ConfigError, ValueError) as err:
            raise OpPrereqError(str(err)) from None
        self.hypervisor = hypervisor
        required = 2 if op.disk_template in MIRRORED else 1
        group = lookup(config.find_group, op.group_name) if op.group_name else None
        if op.pnode:
            nodes = [lookup(config.find_node, op.pnode).name]
            if required == 2:
                if not op.snode:
                    raise OpPrereqError("a drbd instance needs a secondary node (snode)")
                nodes.append(lookup(config.find_node, op.snode).name)
            self.allocator = None
        else:
            names = [op.iallocator] if op.iallocator else \
                c.default_iallocators.get("allocate", [])
            filled = params.fill(params.BE_FAMILY.defaults(), c.beparams, self.beparams)
            request = {
                "type": "allocate", "name": op.instance_name, "required_nodes": required,
                "disk_template": op.disk_template, "os": op.os_type or "",
                "tags": list(op.tags), "hypervisor": hypervisor,
                "memory": filled["maxmem"], "vcpus": filled["vcpus"],
                "spindle_use": filled["spindle_use"],
                "disks": [{"size": s, "mode": d.get("mode", "rw"), "spindles": 1}
                          for s, d in zip(self.sizes, op.disks, strict=True)],
                "disk_space_total": iallocator.disk_space_total(op.disk_template, self.sizes),
                "nics": [{"ip": n.get("ip"), "mac": n.get("mac", "auto"),
                          "bridge": n.get("link")} for n in op.nics],
            }
            if group is not None:
                request["group_name"] = group.name
            live = live_figures(self.env, config, self.feedback)
            self.allocator, nodes = iallocator.allocate_nodes(
                config, names, request, live, self.env.iallocator_path or
                iallocator.DEFAULT_SEARCH_PATH)
        chosen = [lookup(config.find_node, n) for n in nodes]
        for node in chosen:
            if node.offline or node.drained or not node.vm_capable:
                raise OpPrereqError(f"node {node.name} is offline, drained or not vm capable",
                                    "wrong_state")
        if group is not None and any(n.group != group.uuid for n in chosen):
            raise OpPrereqError(f"the nodes given are not all in node group {group.name}",
                                "wrong_input")
        if len({n.uuid for n in chosen}) != len(chosen):
            raise OpPrereqError("primary and secondary node must differ")
        self.nodes = chosen
        # a trial on a copy: the networks, pools and MACs refuse bad NICs before anything
        self._nics(config, lambda message: None, keep=False)
        self._check_fits(config)

    def _check_fits(self, config: model.ConfigData) -> None:
        """Ganeti's CheckPrereq of the chosen nodes, whoever chose them: the primary's group
        policy (unless ignore_ipolicy), the disks' space on every node, and, when the
        instance is to start, the primary's free memory."""
        op = self.op
        filled = params.fill(params.BE_FAMILY.defaults(), config.cluster.beparams,
                             self.beparams)
        spec = verify.InstanceSpec(
            memory=filled["maxmem"], cpus=filled["vcpus"], disk_sizes=self.sizes,
            nics=len(op.nics), spindle_use=filled["spindle_use"],
            template=op.disk_template)
        ignored = fit.refuse_violations(config, self.nodes[0], spec,
                                        ignore=op.ignore_ipolicy)
        if ignored:
            self.feedback(f"instance policy violations ignored: {', '.join(ignored)}")
        if not any(disk.get("adopt") for disk in op.disks):
            fit.check_free_disk(self.env, config, self.nodes, op.disk_template, self.sizes)
        if op.start:
            fit.check_free_memory(self.env, self.nodes[0], filled["maxmem"],
                                  f"creating instance {op.instance_name}")

    def _read_export(self, config: model.ConfigData) -> None:
        """Ganeti's _ReadExportParams: what the request leaves out comes from the export's
        config.ini; the OS is not installed (the disks receive the export's dumps)."""
        op = self.op
        self.source = lookup(config.find_node, op.src_node or "")
        self.export = exports.import_export_info(self.env, self.source,
                                                opcodes.export_name(op.src_path or ""))
        info = self.export
        op.disk_template = op.disk_template or info.disk_template
        op.os_type = op.os_type or info.os
        op.hypervisor = op.hypervisor or info.hypervisor or None
        if not op.disks:
            op.disks = [{"size": disk.size, **({"name": disk.name} if disk.name else {})}
                        for disk in info.disks]
        if len(op.disks) != len(info.disks):
            raise OpPrereqError(f"the export has {len(info.disks)} disks, the request "
                                f"{len(op.disks)}", "wrong_input")
        if op.nics == [{}]:  # left out (herder's default): the export's NICs
            taken = {n.mac for i in configdiff.plain_values(config.instances) for n in i.nics}
            for nic in info.nics:
                if nic.mac in taken:
                    self.feedback(f"MAC {nic.mac} of the export is in use: a new one instead")
            op.nics = [{"mac": nic.mac if nic.mac not in taken else "generate",
                        **nic.nicparams, **{k: v for k in ("ip", "name", "network")
                                            if (v := getattr(nic, k)) is not None}}
                       for nic in info.nics]
        op.beparams = {**info.beparams, **op.beparams}
        if op.hypervisor == info.hypervisor:
            op.hvparams = {**info.hvparams, **op.hvparams}
        op.osparams = {**info.osparams, **op.osparams}
        op.tags = op.tags or list(info.tags)
        op.no_install = True

    def _fill_disks(self, inst: model.Instance) -> None:
        """An import's disks receive the export's dumps, streamed from the source node through
        the OS's `import` script on the primary (Ganeti's rule)."""
        assert self.source is not None
        config = self.env.store.load()
        target = self.nodes[0]
        for index, (disk, dump) in enumerate(zip(inst.disks, self.export.disks, strict=True)):
            self.feedback(f"importing {disk.iv_name} from {self.source.name}")
            started = time.monotonic()
            prepared = self.env.rpc.call(target, disk_calls.BlockdevImportPrepare(
                disk=diskobjects.disk_object(config, inst, disk, target.uuid),
                instance=inst.name, idx=index, os_instance=instance_payload(config, inst)))
            sent = self.env.rpc.call(self.source, backup_calls.ExportSend(
                name=opcodes.export_name(self.op.src_path or ""), dump=dump.dump,
                token=prepared.token, target=exports.node_target(self.env, target)),
                timeout=backup_calls.STREAM_TIMEOUT)
            self.feedback(exports.progress_line(disk.iv_name, sent.bytes or 0,
                                               time.monotonic() - started))

    def dry_run_result(self) -> JobResult:
        return [n.name for n in self.nodes]

    @classmethod
    def after_master_death(cls, op: opcodes.OpInstanceCreate) -> list[dict[str, object]]:
        """A remote import the master died in leaves a half-made instance (recorded, its
        disks partly received): the queue's recovery removes it, as an export's recovery
        removes its partial export (`lu/backup`), so the failed job leaves what it found.
        Only an instance still marked `incomplete` is removed (`lu/instance.InstanceRemove`)."""
        if op.mode != "remote-import":
            return []
        return [{"OP_ID": "OP_INSTANCE_REMOVE", "instance_name": op.instance_name,
                 "cleanup": True}]

    def _build(self, config: model.ConfigData) -> model.Instance:
        op = self.op
        stamp = model.now()
        inst_uuid = model.new_uuid()
        reserved = diskgen.Reservations()
        new_disks: list[model.Disk] = []
        for index, (size, spec) in enumerate(zip(self.sizes, op.disks, strict=True)):
            new_disks.append(diskgen.new_disk(
                config, op.disk_template, index, size, spec, [n.uuid for n in self.nodes],
                op.instance_name, reserved, others=new_disks))
        nics = self._nics(config, self.feedback)
        return model.Instance(
            uuid=inst_uuid, name=op.instance_name, primary_node=self.nodes[0].uuid,
            os=op.os_type or "none", hypervisor=self.hypervisor, admin_state="down",
            disks=new_disks, nics=nics, hvparams=self.hvparams, beparams=self.beparams,
            osparams={k: str(v) for k, v in op.osparams.items()}, tags=list(op.tags),
            ctime=stamp, mtime=stamp, incomplete=op.mode == "remote-import",
        )

    def _nics(self, config: model.ConfigData, feedback: nics.Feedback, *,
              keep: bool = True) -> list[model.NIC]:
        """The new NICs, their addresses taken from (or reserved in) their networks' pools,
        which are written with the instance (`keep`; a trial leaves the config as it is)."""
        ctx = nics.NicContext.of(config, self.nodes[0], feedback, self.op.conflicts_check)
        made = [nics.new_nic(ctx, dict(spec), f"NIC {index}")
                for index, spec in enumerate(self.op.nics)]
        if len(made) > nics.MAX_NICS:
            raise OpPrereqError(f"Instance has too many network interfaces ({len(made)})",
                                "wrong_input")
        if keep:
            ctx.pools.keep()
        return made

    def execute(self) -> JobResult:
        with self.env.store.update() as config:
            inst = self._build(config)
            if portpool.needs_port(inst.hypervisor):
                inst.network_port = portpool.allocate(config)
            config.instances[inst.uuid] = inst
        if self.allocator:
            self.feedback(f"iallocator {self.allocator} chose "
                          f"{', '.join(n.name for n in self.nodes)}")
        # The placement is done and the instance recorded: from here on only the new instance
        # and its nodes are locked (Ganeti's LUInstanceCreate releases the node-allocation
        # lock once the nodes are chosen), so its disks' creation, an import's or a move's
        # streams, the install and the start (minutes for a large disk) do not stop the jobs
        # on other instances and nodes. Nothing else holds a lock while the BGL is ours
        # exclusively: these are taken at once.
        self.env.locks.add(locking.LEVEL_INSTANCE, inst.uuid, acquired=True)
        self.env.locks.acquire(locking.LEVEL_NODE, sorted({n.uuid for n in self.nodes}))
        self.env.locks.downgrade(locking.LEVEL_CLUSTER)
        try:
            return self._make(inst.uuid)
        finally:  # (the processor releases only the BGL, which needs these released first)
            for level in (locking.LEVEL_NODE, locking.LEVEL_INSTANCE):
                if self.env.locks.is_owned(level):
                    self.env.locks.release(level)

    def _make(self, inst_uuid: str) -> JobResult:
        """The recorded instance made: its disks, its domain, its data (import, remote
        import or OS install), started; undone on a failure."""
        op = self.op
        config = self.env.store.load()
        inst = config.instances[inst_uuid]
        payload = instance_payload(config, inst)
        claim = vmclaim.claim_for(config, inst)
        made = False
        try:
            disks.create_and_sync(self.env, config, inst, wait=op.wait_for_sync,
                                  feedback=self.feedback)
            made = True
            self.env.rpc.call(self.nodes[0], instance_calls.InstanceDefine(
                instance=payload, name=inst.name, reason=op.reason, version=inst.serial_no,
                claim=claim))
            if op.mode == "import":
                self._fill_disks(inst)
            elif self.source_ca is not None:
                remote_streams.receive_disks(
                    self.env, config, inst, self.nodes[0], self.source_ca,
                    op.source_shutdown_timeout, self.feedback, self.log_entry)
            if not op.no_install:
                self.env.rpc.call(self.nodes[0], instance_calls.InstanceOsAdd(
                    instance=payload, name=inst.name, reason=op.reason,
                    version=inst.serial_no, claim=claim, force_variant=op.force_variant))
            if op.start:
                kvm_verdict_feedback(self.env, self.nodes[0], inst, self.feedback)
                self.env.rpc.call(self.nodes[0], instance_calls.InstanceStart(
                    instance=payload, name=inst.name, reason=op.reason,
                    version=inst.serial_no, claim=claim))
        except HerderError:
            self._undo(config, inst, remove_disks=made)
            raise
        if op.start or inst.incomplete:  # (one write: made, and running when asked)
            with self.env.store.update() as fresh:
                finished = fresh.instances[inst.uuid]
                finished.incomplete = False
                if op.start:
                    finished.admin_state, finished.disks_active = "up", True
        return [n.name for n in self.nodes]

    def _undo(self, config: model.ConfigData, inst: model.Instance, *,
              remove_disks: bool) -> None:
        """Remove what the creation made: the domain, then the disks (an adopted device
        stays: it was the operator's), then the config entry. When a node could not be
        reached for that (it died meanwhile), the instance stays in the config, stopped:
        what is left on the node keeps an owner, and `instance remove` finishes the job."""
        self.feedback(f"creation of {inst.name} failed; removing what was created")
        cleaned = True
        for node in self.nodes:
            try:
                self.env.rpc.call(node, instance_calls.InstanceRemove(name=inst.name))
            except HerderError as err:
                self.feedback(f"cleanup on {node.name} failed: {err}")
                cleaned = False
        if inst.disk_template == "blockdev":
            disks.shutdown_disks(self.env, config, inst, feedback=self.feedback)
        elif remove_disks:
            cleaned = disks.remove_disks(self.env, config, inst,
                                         feedback=self.feedback) and cleaned
        if not cleaned:
            with self.env.store.update() as fresh:
                kept = fresh.instances[inst.uuid]
                kept.admin_state, kept.disks_active = "down", False
            self.feedback(f"{inst.name} is kept in the configuration, stopped, because its "
                          f"node did not answer the cleanup; run `herder instance remove "
                          f"{inst.name}` once the node is back")
            return
        with self.env.store.update() as config:
            removed = config.instances.pop(inst.uuid, None)
            portpool.release(config, removed.network_port if removed else None)
        self.env.locks.remove(locking.LEVEL_INSTANCE, [inst.uuid])
