// workqueue dashboard: the status drawer on touch screens, the item
// actions, and live updates over server-sent events. No build step.
(function () {
  "use strict";
  var csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";
  var coarse = window.matchMedia("(pointer: coarse)");
  var drawer = document.getElementById("drawer");
  var drawerBody = document.getElementById("drawer-body");
  var opener = null;

  function openDrawer(icon) {
    var tip = document.getElementById(icon.getAttribute("data-tip"));
    if (!tip || !drawer) return;
    drawerBody.innerHTML = "";
    var copy = tip.cloneNode(true);
    copy.removeAttribute("id");
    copy.removeAttribute("role");
    copy.className = "drawer-summary";
    drawerBody.appendChild(copy);
    drawer.hidden = false;
    document.documentElement.classList.add("drawer-open");
    opener = icon;
    drawer.querySelector(".close").focus();
  }

  function closeDrawer() {
    if (!drawer || drawer.hidden) return;
    drawer.hidden = true;
    document.documentElement.classList.remove("drawer-open");
    if (opener) opener.focus();
    opener = null;
  }

  document.addEventListener("click", function (event) {
    var icon = event.target.closest(".status-icon");
    if (icon && coarse.matches) {
      event.preventDefault();
      openDrawer(icon);
      return;
    }
    if (event.target.closest("[data-close-drawer]")) {
      closeDrawer();
      return;
    }
    var action = event.target.closest("button.action");
    if (action) runAction(action);
  });
  // A finger on the icon opens the drawer at once (no click may follow a
  // tap on every browser).
  document.addEventListener("touchend", function (event) {
    var icon = event.target.closest(".status-icon");
    if (icon) {
      event.preventDefault();
      openDrawer(icon);
      return;
    }
    if (event.target.closest("[data-close-drawer]")) {
      event.preventDefault();
      closeDrawer();
    }
  }, { passive: false });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape") closeDrawer();
  });

  function swap(id, html) {
    var current = document.getElementById(id);
    if (!current) return;
    var holder = document.createElement("div");
    holder.innerHTML = html;
    var next = holder.querySelector("#" + id);
    if (!next) return;
    var outcome = current.querySelector("#outcome");
    var focused = document.activeElement && document.activeElement.getAttribute("data-action");
    current.replaceWith(next);
    if (outcome) {
      var fresh = next.querySelector("#outcome");
      if (fresh) {
        fresh.textContent = outcome.textContent;
        fresh.setAttribute("data-outcome", outcome.getAttribute("data-outcome") || "");
      }
    }
    if (focused) {
      var again = next.querySelector('[data-action="' + focused + '"]');
      if (again) again.focus();
    }
    var count = Number(document.body.getAttribute("data-updates") || "0") + 1;
    document.body.setAttribute("data-updates", String(count));
  }

  function refresh() {
    var live = document.body.getAttribute("data-live");
    var url;
    if (live === "list") {
      url = "/ui/fragments/rows" + window.location.search;
    } else if (live === "item") {
      var item = document.getElementById("item");
      if (!item) return Promise.resolve();
      url = "/ui/fragments/items/" + item.getAttribute("data-item");
    } else {
      return Promise.resolve();
    }
    return fetch(url, { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html) swap(live === "list" ? "rows" : "item", html);
      });
  }

  function runAction(button) {
    var item = document.getElementById("item");
    if (!item) return;
    var outcome = document.getElementById("outcome");
    var name = button.getAttribute("data-action");
    var body = name === "merge" ? JSON.stringify({ expected_head_sha: item.getAttribute("data-head") }) : "";
    button.disabled = true;
    fetch("/ui/items/" + item.getAttribute("data-item") + "/actions/" + name, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: body
    })
      .then(function (response) { return response.json(); })
      .then(function (answer) {
        outcome.textContent = answer.message;
        outcome.setAttribute("data-outcome", answer.outcome);
        outcome.className = "outcome " + (answer.ok ? "ok" : "refused");
      })
      .catch(function () {
        outcome.textContent = "The request failed; try again.";
        outcome.setAttribute("data-outcome", "refused");
      })
      .then(function () { button.disabled = false; return refresh(); });
  }

  var pending = null;
  function soon() {
    if (pending) return;
    pending = setTimeout(function () { pending = null; refresh(); }, 150);
  }

  var liveState = document.getElementById("live-state");
  if (document.body.getAttribute("data-live") && window.EventSource) {
    var source = new EventSource("/ui/events");
    source.addEventListener("ready", function () {
      liveState.setAttribute("data-state", "open");
      liveState.textContent = "Live";
    });
    source.addEventListener("change", function (event) {
      var live = document.body.getAttribute("data-live");
      if (live === "item") {
        var change = JSON.parse(event.data);
        var item = document.getElementById("item");
        if (!item || item.getAttribute("data-item") !== change.item_id) return;
      }
      soon();
    });
    source.addEventListener("resync", soon);
    source.onerror = function () {
      liveState.setAttribute("data-state", "reconnecting");
      liveState.textContent = "Reconnecting…";
    };
  }
})();
