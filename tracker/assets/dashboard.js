// Placeholder until the dashboard page lands: shows each state event as JSON.
"use strict";
const source = new EventSource("/api/stream");
source.addEventListener("state", (event) => {
  document.getElementById("state").textContent = JSON.stringify(JSON.parse(event.data), null, 2);
});
