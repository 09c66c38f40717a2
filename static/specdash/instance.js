// Live view of one server instance: state, history, readiness progress and log tail
// arrive over the websocket; a state change that ends in a settled state reloads the page
// once so server-rendered parts (evidence, facts) are complete.
(function () {
  "use strict";
  const id = JSON.parse(document.getElementById("instance-id").textContent);
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const settled = new Set(["stopped", "failed", "crashed", "dirty", "lost", "ready"]);
  const initial = document.getElementById("instance-state").textContent.trim();
  let retry = 500;

  function setState(instance) {
    const el = document.getElementById("instance-state");
    el.textContent = instance.state;
    el.className = "state state-" + instance.state;
    document.getElementById("instance-reason").textContent = instance.reason || "-";
    if (instance.state !== initial && settled.has(instance.state)) {
      setTimeout(() => location.reload(), 300);
    }
  }

  // The socket subscribes before it reads its snapshot, so an event may come both in the
  // snapshot and live, and the snapshot may hold events newer than this page: each id once.
  function addEvent(e) {
    const list = document.getElementById("instance-events");
    if (list.querySelector('li[data-event-id="' + e.id + '"]')) return;
    const li = document.createElement("li");
    li.dataset.eventId = e.id;
    const time = document.createElement("time");
    time.textContent = new Date(e.at).toLocaleTimeString();
    li.appendChild(time);
    li.appendChild(document.createTextNode(" " + (e.state ? "[" + e.state + "] " : "") + e.message));
    list.appendChild(li);
  }

  function connect() {
    const ws = new WebSocket(scheme + "://" + location.host + "/ws/instances/" + id + "/");
    ws.onopen = () => { retry = 500; };
    ws.onmessage = (message) => {
      const data = JSON.parse(message.data);
      if (data.type === "snapshot") {
        setState(data.instance);
        data.events.forEach(addEvent);
      } else if (data.type === "instance.state") {
        setState(data.instance);
      } else if (data.type === "instance.event") {
        addEvent(data);
      } else if (data.type === "instance.log") {
        const log = document.getElementById("instance-log");
        log.textContent = data.log_tail;
        log.scrollTop = log.scrollHeight;
      } else if (data.type === "instance.readiness") {
        document.getElementById("instance-readiness").textContent = "waiting: " + data.stage + " " + (data.detail || "");
      }
    };
    ws.onclose = (event) => {
      // A refusal is final (4401/4403/4404 from the consumer, 1008 for a policy): retrying
      // would be refused again, every few seconds for as long as the page stays open.
      if (event.code === 1008 || (event.code >= 4000 && event.code < 5000)) return;
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 10000);
    };
  }
  connect();
})();
