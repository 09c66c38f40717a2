// A websocket to one of the dashboard's live groups, reconnecting with back-off.
// Each message is JSON: first {"type": "snapshot", ...}, then events such as "sweep.samples".
// Close codes 4401/4403/4404 (not allowed, no such object) are final: no reconnect.
(function () {
  "use strict";

  function connect(path, onMessage, options) {
    const opts = options || {};
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    let delay = 1000;
    let stopped = false;
    let socket = null;

    function open() {
      socket = new WebSocket(scheme + "//" + window.location.host + path);
      socket.addEventListener("open", function () {
        delay = 1000;
        if (opts.onOpen) opts.onOpen();
      });
      socket.addEventListener("message", function (event) {
        let message;
        try {
          message = JSON.parse(event.data);
        } catch (err) {
          return;
        }
        onMessage(message);
      });
      socket.addEventListener("close", function (event) {
        if (opts.onClose) opts.onClose(event.code);
        if (stopped || (event.code >= 4400 && event.code < 4500)) return;
        window.setTimeout(open, delay);
        delay = Math.min(delay * 2, 15000);
      });
    }

    open();
    return {
      close: function () {
        stopped = true;
        if (socket) socket.close();
      },
    };
  }

  window.specdashLive = { connect: connect };
})();
