// schedd dashboard: a confirm before each action, and the live runs table.
// Data is only ever set with textContent (never as HTML).
"use strict";

document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.getAttribute("data-confirm"))) {
        event.preventDefault();
      }
    });
  });

  var live = document.getElementById("runs-live");
  if (!live) {
    return;
  }
  var src = live.getAttribute("data-src");
  var status = document.getElementById("live-status");

  function render(data) {
    var body = document.getElementById("runs").querySelector("tbody") ||
      document.getElementById("runs");
    var rows = document.createDocumentFragment();
    data.rows.forEach(function (cells, row) {
      var tr = document.createElement("tr");
      var job = data.jobs[row];  // [id, name]; no name: the job was deleted
      cells.forEach(function (cell, i) {
        var td = document.createElement("td");
        if (i === 1 && job[1]) {  // the job: its name, a link to its page
          var a = document.createElement("a");
          a.href = "/jobs/" + encodeURIComponent(job[0]);
          a.textContent = job[1];
          td.appendChild(a);
        } else if (i === 1) {
          var gone = document.createElement("span");
          gone.className = "gone";
          gone.textContent = job[0] + " (deleted)";
          td.appendChild(gone);
        } else if (i === 3) {  // the state: a coloured badge
          var badge = document.createElement("span");
          badge.className = "badge st-" + cell;
          badge.textContent = cell;
          td.appendChild(badge);
        } else {
          td.textContent = cell;
        }
        tr.appendChild(td);
      });
      rows.appendChild(tr);
    });
    body.replaceChildren(rows);
    status.textContent = data.rows.length + (data.rows.length === 1 ? " run" : " runs") + ", updated " +
      new Date().toLocaleTimeString();
  }

  function poll() {
    fetch(src, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.json(); })
      .then(function (data) {
        if (data.error) {
          status.textContent = "update failed: " + data.error;
        } else {
          render(data);
        }
      })
      .catch(function (err) { status.textContent = "update failed: " + err; })
      .finally(function () { window.setTimeout(poll, 2000); });
  }
  window.setTimeout(poll, 2000);
});
