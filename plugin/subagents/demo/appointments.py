"""Demo MCP server: a clinic's doctors, free slots and bookings (in memory)."""

from __future__ import annotations

import itertools

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True)

DOCTORS = {
    "dr_smith": "Dr. Anna Smith (general practice)",
    "dr_jones": "Dr. Tom Jones (dermatology)",
    "dr_patel": "Dr. Priya Patel (paediatrics)",
}
FREE_SLOTS = {
    "dr_smith": {"2026-12-01": ["09:00", "10:30", "14:00"], "2026-12-02": ["11:00", "15:30"]},
    "dr_jones": {"2026-12-01": ["13:00"], "2026-12-03": ["09:30", "10:00"]},
    "dr_patel": {"2026-12-02": ["08:30", "12:00"], "2026-12-03": ["16:00"]},
}
BOOKINGS: dict[str, dict[str, str]] = {}
_ids = itertools.count(1001)

server = MCPServer("appointments", instructions="Find and book doctor appointments.")


def _doctor(doctor: str) -> str:
    key = doctor.strip().lower().replace(" ", "_").replace(".", "")
    if key not in DOCTORS:
        raise ToolError(f"unknown doctor {doctor!r}; doctors: {', '.join(DOCTORS)}")
    return key


@server.tool(annotations=READ_ONLY)
def list_doctors() -> str:
    """List the clinic's doctors with their ids."""
    return "\n".join(f"{key}: {label}" for key, label in DOCTORS.items())


@server.tool(annotations=READ_ONLY)
def find_free_slots(doctor: str, date: str | None = None) -> str:
    """Free appointment times of a doctor, optionally on one date (YYYY-MM-DD)."""
    slots = FREE_SLOTS[_doctor(doctor)]
    days = {date: slots.get(date, [])} if date else slots
    lines = [f"{day}: {', '.join(times) or 'fully booked'}" for day, times in days.items()]
    return "\n".join(lines)


@server.tool()
def book_appointment(doctor: str, date: str, time: str, patient_name: str) -> str:
    """Book an appointment; returns the booking reference."""
    key = _doctor(doctor)
    times = FREE_SLOTS[key].get(date, [])
    if time not in times:
        free = ", ".join(times) or "none"
        raise ToolError(f"{time} on {date} is not free for {key}; free: {free}")
    times.remove(time)
    ref = f"APT-{next(_ids)}"
    BOOKINGS[ref] = {"doctor": key, "date": date, "time": time, "patient": patient_name}
    return f"booked {ref}: {DOCTORS[key]} on {date} at {time} for {patient_name}"


if __name__ == "__main__":
    from subagents.demo._serve import serve

    serve(server)
