// The few lines of script the UI needs (no framework, no build step):
// 1. the overview's live part is refetched every few seconds;
// 2. the rule builder shows the fieldsets of the chosen kind of rule (alert, trigger, watch).
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const live = document.getElementById("live");
  if (live) {
    const every = Math.max(Number(live.dataset.every) || 2, 1) * 1000;
    const refresh = async () => {
      try {
        const r = await fetch(live.dataset.refresh, { credentials: "same-origin" });
        if (r.ok) live.innerHTML = await r.text();
      } catch (e) { /* the next round tries again */ }
    };
    setInterval(refresh, every);
  }
  const builder = document.getElementById("builder");
  if (builder) {
    const show = () => {
      const kind = builder.querySelector("input[name=kind]:checked")?.value || "trigger";
      builder.querySelectorAll("fieldset[data-kind]").forEach((fs) => {
        // data-kind lists the kinds a fieldset serves ("trigger alert": an alert is a
        // trigger without query feeds).
        const off = !fs.dataset.kind.split(" ").includes(kind);
        fs.hidden = off;
        fs.disabled = off;
      });
    };
    builder.querySelectorAll("input[name=kind]").forEach((el) => el.addEventListener("change", show));
    show();
  }
});
