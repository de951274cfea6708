"""Run Ganeti 3.0's own network code on cases read as JSON from stdin; print its answers.
Run with Debian's /usr/bin/python3 and PYTHONPATH=<Ganeti 3.0's tree> (tests/unit/
test_addrpool.py). Two kinds of case:

- `{"pool": {network, reservations, ext_reservations}, "steps": [[op, address, external]]}`:
  `network.AddressPool`'s Reserve / Release / IsReserved / GetFreeAddress / GenerateFree /
  Contains, each step's answer or error, then the pool's bit strings, map and counts;
- `{"add": {OpNetworkAdd's fields}, "nodes": [[name, primary, secondary]], "master_ip",
  "modify": [{OpNetworkSetParams's fields}, ...]}`: LUNetworkAdd's Exec, then for each
  modification LUNetworkSetParams's CheckArguments, CheckPrereq and Exec, on a stand-in of
  the config (only the calls these LUs make); the network after each, the warnings and info
  lines they log, or the error that stopped them.
"""

import json
import sys
import types

from ganeti.cmdlib import network as cmd_network

from ganeti import errors, network, objects, opcodes


def pool_case(case):
    net = types.SimpleNamespace(**{"gateway": None, "network6": None, "gateway6": None,
                                   "reservations": None, "ext_reservations": None,
                                   **case["pool"]})
    pool = network.AddressPool(net)
    answers = []
    for op, address, external in case["steps"]:
        try:
            if op == "reserve":
                answers.append(["ok", pool.Reserve(address, external=external)])
            elif op == "release":
                answers.append(["ok", pool.Release(address, external=external)])
            elif op == "is_reserved":
                answers.append(["ok", bool(pool.IsReserved(address, external=external))])
            elif op == "contains":
                answers.append(["ok", pool.Contains(address)])
            elif op == "take_free":
                answers.append(["ok", pool.GetFreeAddress()])
            elif op == "generate_free":
                answers.append(["ok", pool.GenerateFree()])
        except errors.AddressPoolError as err:
            answers.append(["error", str(err)])
    pool.Update()
    return {"answers": answers, "reservations": net.reservations,
            "ext_reservations": net.ext_reservations, "map": pool.GetMap(),
            "free": pool.GetFreeCount(), "reserved": pool.GetReservedCount(),
            "external": pool.GetExternalReservations(), "full": bool(pool.IsFull())}


class Config:
    """The config calls LUNetworkAdd and LUNetworkSetParams make."""

    def __init__(self, case):
        self.nodes = {name: objects.Node(name=name, primary_ip=pip, secondary_ip=sip)
                      for name, pip, sip in case["nodes"]}
        self.cluster = objects.Cluster(master_ip=case["master_ip"])
        self.network = None

    def GetAllNodesInfo(self):
        return dict(sorted(self.nodes.items()))

    def GetClusterInfo(self):
        return self.cluster

    def AddNetwork(self, net, _ec_id, check_uuid=True):
        self.network = net

    def GetNetwork(self, _uuid):
        return self.network

    def Update(self, _obj, _feedback):
        pass


def _lu(cls, op, cfg, log):
    lu = object.__new__(cls)
    lu.op, lu.cfg = op, cfg
    lu.proc = types.SimpleNamespace(GetECId=lambda: "ec")
    lu.LogWarning = lambda msg, *args: log.append(["warning", msg % args if args else msg])
    lu.LogInfo = lambda msg, *args: log.append(["info", msg % args if args else msg])
    lu.network_uuid = "net-uuid"
    return lu


def _shown(net):
    return {key: getattr(net, key) for key in ("name", "network", "gateway", "network6",
                                               "gateway6", "mac_prefix", "reservations",
                                               "ext_reservations")}


def lu_case(case):
    cfg = Config(case)
    steps = []
    log = []
    try:
        lu = _lu(cmd_network.LUNetworkAdd, opcodes.OpNetworkAdd(**case["add"]), cfg, log)
        lu.CheckArguments()
        lu.Exec(None)
    except (errors.OpPrereqError, errors.OpExecError, errors.AddressPoolError) as err:
        return [{"error": str(err.args[0]), "log": log}]
    steps.append({"network": _shown(cfg.network), "log": log})
    for fields in case.get("modify", []):
        log = []
        try:
            lu = _lu(cmd_network.LUNetworkSetParams, opcodes.OpNetworkSetParams(**fields), cfg,
                     log)
            lu.CheckArguments()
            lu.CheckPrereq()
            lu.Exec(None)
        except (errors.OpPrereqError, errors.OpExecError, errors.AddressPoolError) as err:
            # (an AddressPoolError escapes LUNetworkSetParams.Exec: the job fails with it)
            steps.append({"error": str(err.args[0]), "log": log})
            continue
        steps.append({"network": _shown(cfg.network), "log": log})
    return steps


def main():
    out = []
    for case in json.load(sys.stdin):
        out.append(pool_case(case) if "pool" in case else lu_case(case))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
