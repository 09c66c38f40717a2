// Live view of one server instance: state, history, readiness progress and log tail arrive
// over the instance's socket (specdashLive). When the state moves on from the one the page's
// server-rendered part (#instance-live: facts, history, evidence) shows, that part is swapped
// for a fresh one (the view renders just the partial for an htmx request); the charts, the
// log and the socket stay as they are.
(function () {
  "use strict";

  const id = JSON.parse(document.getElementById("instance-id").textContent);

  function rendered() {
    const part = document.getElementById("instance-live");
    return part ? part.dataset.state : null;
  }

  // "waiting: ..." describes a start in progress; once the state has moved past it (ready,
  // failed, stopped, ...) the line goes, and a readiness event arriving late does not bring
  // it back. The stage is broadcast once, when it changes: a socket that subscribes after
  // that reads it from the instance row of its snapshot.
  const WAITING_STATES = ["starting", "loading"];
  let current = rendered();

  function setReadiness(text) {
    document.getElementById("instance-readiness").textContent = text;
  }

  function setState(instance) {
    current = instance.state;
    if (WAITING_STATES.indexOf(current) < 0) setReadiness("");
    else if (instance.readiness) setReadiness("waiting: " + instance.readiness);
    const el = document.getElementById("instance-state");
    el.textContent = instance.state;
    el.className = "state state-" + instance.state;
    document.getElementById("instance-reason").textContent = instance.reason || "-";
    if (instance.state !== rendered()) {
      document.body.dispatchEvent(new CustomEvent("instance-changed"));
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

  window.specdashLive.connect("/ws/instances/" + id + "/", {
    "snapshot": function (message) {
      setState(message.instance);
      message.events.forEach(addEvent);
    },
    "instance.state": function (message) { setState(message.instance); },
    "instance.event": addEvent,
    "instance.log": function (message) {
      const log = document.getElementById("instance-log");
      log.textContent = message.log_tail;
      log.scrollTop = log.scrollHeight;
    },
    "instance.readiness": function (message) {
      if (WAITING_STATES.indexOf(current) < 0) return;
      setReadiness(("waiting: " + message.stage + " " + (message.detail || "")).trim());
    },
  });
})();
