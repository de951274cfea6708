"""`herder instance console NAME`: the serial console through masterd's websocket
(`/2/instances/NAME/console/serial`), Ctrl-] leaves; `--show-cmd` prints what
`gnt-instance console --show-cmd` prints; `--log` prints the tail of the serial log."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import termios
import tty
from collections.abc import Iterator
from typing import BinaryIO
from urllib.parse import quote

import aiohttp
import click

from herder.core import console
from herder.core.errors import HerderError
from herder.core.rapi import RapiClient, RapiError

ESCAPE = b"\x1d"  # Ctrl-], as Ganeti's socat console and virsh console
UNAVAILABLE = "Instance console unavailable"


def console_object(api: RapiClient, name: str) -> dict[str, object]:
    """The console object; Ganeti's one line when the instance does not run."""
    try:
        return api.get_instance_console(name)
    except RapiError as err:
        if err.status == 503 and str(err).rstrip(")").endswith(UNAVAILABLE):
            raise HerderError(f"Instance {name} is not running, can't get console") from None
        raise


@contextlib.contextmanager
def raw_terminal(fd: int) -> Iterator[None]:
    """The terminal in raw mode (keys go to the guest as typed) while inside; restored after."""
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def attach(api: RapiClient, name: str, stdin_fd: int, stdout: BinaryIO) -> str:
    """Copy the serial console to `stdout` and `stdin_fd` to it until Ctrl-], the end of the
    input or the end of the console; says which."""
    url, headers, tls = api.websocket(f"/2/instances/{quote(name, safe='')}/console/serial")
    loop = asyncio.get_running_loop()
    typed: asyncio.Queue[bytes] = asyncio.Queue()

    def readable() -> None:
        try:
            data = os.read(stdin_fd, 4096)
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(stdin_fd)
        typed.put_nowait(data)

    async with aiohttp.ClientSession() as session:
        try:
            ws = await session.ws_connect(url, headers=headers, ssl=tls, heartbeat=30.0)
        except aiohttp.WSServerHandshakeError as err:
            raise HerderError(f"cannot open the serial console of {name}: {err.status} "
                              f"{err.message}") from None
        except (aiohttp.ClientError, OSError) as err:
            raise HerderError(f"cannot reach masterd at {api.base_url}: {err}") from None

        async def show() -> str:
            async for message in ws:
                if message.type == aiohttp.WSMsgType.TEXT:
                    stdout.write(message.data.encode())
                    stdout.flush()
            return "the console closed"

        async def type_in() -> str:
            while True:
                data = await typed.get()
                if not data:
                    return "end of input"
                head, escape, _ = data.partition(ESCAPE)
                if head:
                    await ws.send_str(head.decode("utf-8", errors="replace"))
                if escape:
                    return "left"

        loop.add_reader(stdin_fd, readable)
        tasks = [asyncio.ensure_future(show()), asyncio.ensure_future(type_in())]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            return next(iter(done)).result()
        finally:
            loop.remove_reader(stdin_fd)
            for task in tasks:
                task.cancel()
            await ws.close()


def run(api: RapiClient, name: str, show_cmd: bool, log: bool, lines: int) -> None:
    if log:
        click.echo(api.get_instance_console_log(name, lines), nl=False)
        return
    found = console_object(api, name)
    if show_cmd or found.get("kind") != "ssh":
        click.echo(console.show_command(found))
        return
    fd = sys.stdin.fileno()
    click.echo(f"Connected to the serial console of {name}; Ctrl-] leaves.", err=True)
    with raw_terminal(fd):
        why = asyncio.run(attach(api, name, fd, sys.stdout.buffer))
    click.echo(f"\r\nConsole of {name}: {why}.", err=True)
