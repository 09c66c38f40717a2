// The one websocket helper every live page uses (base.html loads it before the page's own
// scripts). specdashLive.connect(path, handlers) opens a socket to one of the dashboard's
// live groups and calls handlers[message.type] for each JSON message: first "snapshot",
// then events such as "sweep.samples". It reconnects with back-off (1 s doubling to 15 s;
// each reconnect brings a fresh snapshot) and renews the page's claim when a snapshot asks
// for a keepalive (telemetry). A refusal is final and stops it:
//  - a close code 1008 (policy) or 4400-4499 (the consumers' 4401 not logged in, 4403 no
//    viewer role, 4404 no such object);
//  - a socket that never opened while the page itself is now refused (a consumer's refusal
//    during the handshake reaches the browser as a bare failure, code 1006, so the helper
//    asks the page's own URL, which has the same login and role check: a redirect to the
//    login page, 401, 403 or 404 means a retry would only be refused again).
// The connection state shows in the top bar (#live-status: live, reconnecting, refused).
(function () {
  "use strict";

  const FIRST_DELAY_MS = 1000;
  const MAX_DELAY_MS = 15000;
  const REFUSED_STATUSES = [401, 403, 404];
  const LABELS = {
    connecting: "connecting…",
    live: "live",
    reconnecting: "reconnecting…",
    refused: "live view refused: reload the page",
    closed: "",
  };
  const sockets = [];

  function finalCode(code) {
    return code === 1008 || (code >= 4400 && code < 4500);
  }

  // The worst state of the page's sockets, in the top bar.
  function showStatus() {
    const node = document.getElementById("live-status");
    if (!node) return;
    const states = sockets.map(function (s) { return s.state; });
    const state = ["refused", "reconnecting", "connecting", "live"].find(function (c) {
      return states.indexOf(c) >= 0;
    }) || "closed";
    node.dataset.state = state;
    node.textContent = LABELS[state];
    node.hidden = state === "closed";
  }

  function refusedNow(probe) {
    return window.fetch(probe, {
      method: "HEAD", credentials: "same-origin", redirect: "manual", cache: "no-store",
    }).then(function (response) {
      return response.type === "opaqueredirect" || REFUSED_STATUSES.indexOf(response.status) >= 0;
    }, function () { return false; });
  }

  // handlers: {type: function (message)}; options.probe: the URL asked after a failed
  // handshake (default: this page). Returns the socket's record (also in
  // specdashLive.sockets): state, opened (sockets opened so far), closeCode (the last one),
  // retryPending, socket (the current WebSocket) and close() to end it for good.
  function connect(path, handlers, options) {
    const opts = options || {};
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    const probe = opts.probe || window.location.pathname + window.location.search;
    const live = {
      path: path, state: "connecting", opened: 0, closeCode: null, retryPending: false,
      socket: null,
      close: function () {
        stopped = true;
        window.clearTimeout(retryTimer);
        live.retryPending = false;
        if (socket) socket.close();
        setState("closed");
      },
    };
    let delay = FIRST_DELAY_MS;
    let stopped = false;
    let socket = null;
    let keepalive = null;
    let retryTimer = null;

    function setState(state) {
      live.state = state;
      showStatus();
    }

    function retry() {
      live.retryPending = true;
      setState("reconnecting");
      retryTimer = window.setTimeout(function () {
        live.retryPending = false;
        open();
      }, delay);
      delay = Math.min(delay * 2, MAX_DELAY_MS);
    }

    function open() {
      let wasOpen = false;
      socket = new WebSocket(scheme + "//" + window.location.host + path);
      live.socket = socket;
      live.opened += 1;
      socket.addEventListener("open", function () {
        wasOpen = true;
        delay = FIRST_DELAY_MS;
        setState("live");
      });
      socket.addEventListener("message", function (event) {
        let message;
        try {
          message = JSON.parse(event.data);
        } catch (err) {
          return;
        }
        if (message.type === "snapshot" && message.keepalive_s) {
          const current = socket;
          window.clearInterval(keepalive);
          keepalive = window.setInterval(function () {
            if (current.readyState === WebSocket.OPEN) current.send('{"type": "keepalive"}');
          }, message.keepalive_s * 1000);
        }
        const handler = handlers[message.type];
        if (handler) handler(message);
      });
      socket.addEventListener("close", function (event) {
        window.clearInterval(keepalive);
        live.closeCode = event.code;
        if (stopped) return;
        if (finalCode(event.code)) {
          setState("refused");
          return;
        }
        if (wasOpen) {
          retry();
          return;
        }
        setState("reconnecting");
        refusedNow(probe).then(function (refused) {
          if (stopped) return;
          if (refused) setState("refused");
          else retry();
        });
      });
    }

    sockets.push(live);
    open();
    return live;
  }

  // Seconds as the pages show a duration left: "40 s", "12 min", "1.5 h".
  function formatSeconds(s) {
    if (s < 90) return Math.round(s) + " s";
    if (s < 5400) return Math.round(s / 60) + " min";
    return (s / 3600).toFixed(1) + " h";
  }

  // What the page's json_script tag `id` holds (a live page's config); null without the tag.
  function pageData(id) {
    const node = document.getElementById(id);
    return node ? JSON.parse(node.textContent) : null;
  }

  window.specdashLive = {
    connect: connect, sockets: sockets, formatSeconds: formatSeconds, pageData: pageData,
  };
})();
