// Draws a Trellis run from its view (ledger::RunView::ViewJson) with plain
// SVG, no libraries. The live page (window.TRELLIS_DATA null) polls
// /api/view, /api/workers and /api/job; `trellis report` inlines the view
// as window.TRELLIS_DATA, with "summary" (summary.json), "job" ({name,
// yaml}) and "comparison" (compare.json, when the run has one) added.
//
// The view: current_step, steps_done, time (seconds since the run began),
// steps (step table rows), spans ([start, seconds, stage index, role
// index, step]) with stages and roles, memory {objects, series ([time,
// step, bytes of each object]), peak_bytes, current_bytes, by_role},
// handoffs, verifiers, evals, samples.
(function () {
  "use strict";
  var SVGNS = "http://www.w3.org/2000/svg";
  var STAGE_COLORS = {
    load: "#9e9e9e", sft: "#8d6e63", rollout: "#1f77b4", verify: "#ff7f0e",
    reference: "#9467bd", advantage: "#bcbd22", update: "#2ca02c",
    weight_sync: "#d62728", eval: "#17becf", checkpoint: "#7f7f7f", reward: "#e377c2",
    reference_cache: "#c5b0d5", environment: "#aec7e8"
  };
  var OBJECT_COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                       "#edc948", "#b07aa1", "#9c755f", "#bab0ac", "#ff9da7"];
  var WINDOW_STEPS = 5;
  var timelineFrom = null;  // null: follow the newest steps.
  var last = null;

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function svg(tag, attrs, text) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function clear(id) {
    var e = document.getElementById(id);
    while (e.firstChild) e.removeChild(e.firstChild);
    return e;
  }
  function bytes(n) {
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(n)) + " " + units[i];
  }
  function num(x, digits) {
    if (typeof x !== "number") return "";
    return Math.abs(x) >= 1000 ? x.toFixed(0) : x.toFixed(digits === undefined ? 3 : digits);
  }
  function seconds(s) {
    if (s < 120) return s.toFixed(1) + " s";
    return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
  }
  function table(headers, rows, nameColumns) {
    var t = el("table"), tr = el("tr");
    headers.forEach(function (h, i) { tr.appendChild(el("th", i < nameColumns ? {class: "name"} : {}, h)); });
    t.appendChild(tr);
    rows.forEach(function (r) {
      var row = el("tr");
      r.forEach(function (c, i) { row.appendChild(el("td", i < nameColumns ? {class: "name"} : {}, c)); });
      t.appendChild(row);
    });
    return t;
  }
  function legend(parent, names, colors) {
    var d = el("div", {class: "legend"});
    names.forEach(function (n, i) {
      var s = el("span"), box = el("i");
      box.style.background = colors[i];
      s.appendChild(box);
      s.appendChild(document.createTextNode(n));
      d.appendChild(s);
    });
    parent.appendChild(d);
  }
  // A linear scale from [d0, d1] to [r0, r1].
  function scale(d0, d1, r0, r1) {
    var k = d1 > d0 ? (r1 - r0) / (d1 - d0) : 0;
    return function (v) { return r0 + (v - d0) * k; };
  }
  // Seconds labels under a time axis, with as many decimals as the
  // tick spacing needs.
  function timeAxis(g, x0, x1, y, lo, hi) {
    var ticks = 5, step = (hi - lo) / ticks;
    var digits = step > 0 ? Math.max(0, Math.min(4, Math.ceil(-Math.log10(step)))) : 0;
    for (var i = 0; i <= ticks; i++) {
      var v = lo + step * i, x = x0 + (x1 - x0) * i / ticks;
      var anchor = i === 0 ? "start" : i === ticks ? "end" : "middle";
      g.appendChild(svg("text", {x: x, y: y, "text-anchor": anchor}, v.toFixed(digits) + " s"));
    }
  }

  function drawHeader(d) {
    var step = d.current_step;
    document.getElementById("current-step").textContent = step < 0 ? "set-up" : String(step);
    document.getElementById("steps-done").textContent = String(d.steps_done);
    document.getElementById("elapsed").textContent = seconds(d.time || 0);
    document.getElementById("mode").textContent =
        d.static ? "report of a finished run" : "live (refreshes every 2 s)";
    if (d.job && d.job.name) {
      document.getElementById("job-name").textContent = "— " + d.job.name;
      document.title = "Trellis — " + d.job.name;
    }
  }

  // Small line charts over steps: the ratios the ledger derives.
  function drawRatios(d) {
    var box = clear("ratios-chart");
    var series = [
      ["rollout / update seconds", "rollout_update_ratio"],
      ["effective-sample rate", "effective_sample_rate"],
      ["verifier wait (s)", "verifier_wait_seconds"],
      ["generated tokens/s", "generated_tokens_per_second"],
      ["step seconds", "step_seconds"],
      ["bubble fraction", "bubble_fraction"],
      ["rollout actors", "rollout_actors"],
      ["mean reward", "mean_reward"]
    ];
    series.forEach(function (s) {
      var W = 300, H = 130, L = 44, R = 8, T = 18, B = 20;
      var pts = d.steps.filter(function (r) { return typeof r[s[1]] === "number"; });
      var root = svg("svg", {width: W, height: H, class: "ratio", "data-metric": s[1]});
      root.appendChild(svg("text", {x: L, y: 12}, s[0] + (pts.length ? ": " +
          num(pts[pts.length - 1][s[1]]) : "")));
      if (pts.length) {
        var xs = pts.map(function (r) { return r.step; }), ys = pts.map(function (r) { return r[s[1]]; });
        var x = scale(Math.min.apply(null, xs), Math.max.apply(null, xs), L, W - R);
        var ymax = Math.max.apply(null, ys.concat([1e-9]));
        var y = scale(0, ymax, H - B, T);
        var path = pts.map(function (r, i) { return (i ? "L" : "M") + x(r.step).toFixed(1) + "," + y(r[s[1]]).toFixed(1); });
        root.appendChild(svg("path", {d: path.join(""), fill: "none", stroke: "#23395d", "stroke-width": 1.5}));
        root.appendChild(svg("text", {x: L - 4, y: T + 8, "text-anchor": "end"}, num(ymax, 2)));
        root.appendChild(svg("text", {x: L - 4, y: H - B, "text-anchor": "end"}, "0"));
        root.appendChild(svg("text", {x: L, y: H - 4}, "step " + xs[0]));
        root.appendChild(svg("text", {x: W - R, y: H - 4, "text-anchor": "end"}, "step " + xs[xs.length - 1]));
      }
      root.appendChild(svg("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#999"}));
      box.appendChild(root);
    });
  }

  // Gantt view: a lane per role (worker); spans that overlap in a lane go
  // on sub-rows, so overlaps and the gaps between stages (waits) show.
  function drawTimeline(d) {
    var box = clear("timeline");
    var slider = document.getElementById("timeline-from");
    var lastStep = Math.max(d.current_step, -1);
    var firstStep = d.spans.length ? d.spans[0][4] : -1;
    var newest = Math.max(firstStep, lastStep - WINDOW_STEPS + 1);
    slider.min = String(firstStep);
    slider.max = String(newest);
    var from = timelineFrom === null ? newest : Math.max(firstStep, Math.min(timelineFrom, newest));
    slider.value = String(from);
    var to = from + WINDOW_STEPS - 1;
    document.getElementById("timeline-range").textContent =
        "steps " + (from < 0 ? "set-up" : from) + " to " + Math.min(to, lastStep);
    var spans = d.spans.filter(function (s) { return s[4] >= from && s[4] <= to; });
    if (!spans.length) { box.appendChild(el("p", {}, "no spans yet")); return; }
    var t0 = Infinity, t1 = -Infinity;
    spans.forEach(function (s) { t0 = Math.min(t0, s[0]); t1 = Math.max(t1, s[0] + s[1]); });
    var lanes = {};  // role index -> rows of end times
    var placed = spans.map(function (s) {
      var rows = lanes[s[3]] || (lanes[s[3]] = []);
      var row = 0;
      while (row < rows.length && rows[row] > s[0] + 1e-9) row++;
      rows[row] = s[0] + s[1];
      return {s: s, row: row};
    });
    var roleIds = Object.keys(lanes).map(Number).sort(function (a, b) {
      return d.roles[a] < d.roles[b] ? -1 : 1;
    });
    var ROW = 14, L = 170, W = Math.max(700, box.clientWidth || 1000), R = 10;
    var laneTop = {}, y = 4;
    roleIds.forEach(function (r) { laneTop[r] = y; y += lanes[r].length * ROW + 8; });
    var H = y + 22;
    var x = scale(t0, t1, L, W - R);
    var root = svg("svg", {width: W, height: H, class: "gantt"});
    // Each lane's busy share over the window's closed steps (the ledger's
    // role_busy_seconds: the union of the role's spans in each step).
    var busy = {}, wall = 0;
    d.steps.forEach(function (r) {
      if (r.step < from || r.step > to || !r.role_busy_seconds) return;
      wall += r.step_seconds || 0;
      Object.keys(r.role_busy_seconds).forEach(function (name) {
        busy[name] = (busy[name] || 0) + r.role_busy_seconds[name];
      });
    });
    roleIds.forEach(function (r) {
      var name = d.roles[r];
      var label = wall > 0 ? name + " " + Math.round(100 * (busy[name] || 0) / wall) + "% busy" : name;
      root.appendChild(svg("text", {x: L - 6, y: laneTop[r] + 11, "text-anchor": "end",
                                    class: "lane-label", "data-role": name}, label));
      root.appendChild(svg("line", {x1: L, x2: W - R, y1: laneTop[r] - 3, y2: laneTop[r] - 3, stroke: "#eee"}));
    });
    placed.forEach(function (p) {
      var s = p.s, stage = d.stages[s[2]];
      var rect = svg("rect", {
        class: "span", x: x(s[0]).toFixed(1), y: laneTop[s[3]] + p.row * ROW,
        width: Math.max(1, x(s[0] + s[1]) - x(s[0])).toFixed(1), height: ROW - 2,
        fill: STAGE_COLORS[stage] || "#555", "data-stage": stage
      });
      rect.appendChild(svg("title", {}, stage + " · " + d.roles[s[3]] + " · step " + s[4] +
                                         " · " + s[1].toFixed(3) + " s"));
      root.appendChild(rect);
    });
    var axis = svg("g", {class: "axis"});
    timeAxis(axis, L, W - R, H - 6, t0, t1);
    root.appendChild(axis);
    box.appendChild(root);
    var used = d.stages.filter(function (st, i) { return spans.some(function (s) { return s[2] === i; }); });
    legend(box, used, used.map(function (st) { return STAGE_COLORS[st] || "#555"; }));
  }

  // Stacked areas: each object's bytes over time.
  function drawMemory(d) {
    var box = clear("memory-chart");
    var m = d.memory, series = m.series;
    if (!series.length) { box.appendChild(el("p", {}, "no memory records yet")); return; }
    var W = Math.max(700, box.clientWidth || 1000), H = 220, L = 70, R = 10, T = 8, B = 22;
    var n = m.objects.length;
    var t0 = series[0][0], t1 = series[series.length - 1][0];
    var top = 1;
    series.forEach(function (p) {
      var sum = 0;
      for (var o = 0; o < n; o++) sum += p[2 + o];
      top = Math.max(top, sum);
    });
    var x = scale(t0, Math.max(t1, t0 + 1e-6), L, W - R), y = scale(0, top, H - B, T);
    var root = svg("svg", {width: W, height: H, class: "memory"});
    var below = series.map(function () { return 0; });
    for (var o = 0; o < n; o++) {
      var upper = series.map(function (p, i) { return below[i] + p[2 + o]; });
      if (upper.every(function (v, i) { return v === below[i]; })) continue;
      // A step curve: an object keeps its size until the next record.
      var d1 = "", d2 = "";
      series.forEach(function (p, i) {
        var xa = x(p[0]).toFixed(1), xb = x(i + 1 < series.length ? series[i + 1][0] : p[0]).toFixed(1);
        d1 += (i ? "L" : "M") + xa + "," + y(upper[i]).toFixed(1) + "L" + xb + "," + y(upper[i]).toFixed(1);
      });
      for (var i = series.length - 1; i >= 0; i--) {
        var xa = x(series[i][0]).toFixed(1), xb = x(i + 1 < series.length ? series[i + 1][0] : series[i][0]).toFixed(1);
        d2 += "L" + xb + "," + y(below[i]).toFixed(1) + "L" + xa + "," + y(below[i]).toFixed(1);
      }
      var path = svg("path", {class: "mem-area", d: d1 + d2 + "Z", fill: OBJECT_COLORS[o % OBJECT_COLORS.length],
                              "fill-opacity": 0.85, "data-object": m.objects[o]});
      path.appendChild(svg("title", {}, m.objects[o] + " (peak " + bytes(m.peak_bytes[o]) + ")"));
      root.appendChild(path);
      below = upper;
    }
    root.appendChild(svg("text", {x: L - 4, y: T + 10, "text-anchor": "end"}, bytes(top)));
    root.appendChild(svg("text", {x: L - 4, y: H - B, "text-anchor": "end"}, "0"));
    var axis = svg("g", {class: "axis"});
    timeAxis(axis, L, W - R, H - 6, t0, t1);
    root.appendChild(axis);
    box.appendChild(root);
    legend(box, m.objects, m.objects.map(function (o, i) { return OBJECT_COLORS[i % OBJECT_COLORS.length]; }));
  }

  function drawPeaks(d) {
    var box = clear("peak-table"), m = d.memory;
    var rows = m.objects.map(function (o, i) {
      var roles = m.by_role.filter(function (r) { return r.object === o && r.peak_bytes > 0; })
          .map(function (r) { return r.role + " " + bytes(r.peak_bytes); }).join(", ");
      return [o, bytes(m.peak_bytes[i]), bytes(m.current_bytes[i]), roles];
    });
    box.appendChild(table(["object", "peak", "now", "peak by role"], rows, 1));
    var s = d.summary && d.summary.memory;
    if (s) {
      box.appendChild(el("p", {}, "Run peak (tracked CPU bytes): " + bytes(s.peak_bytes) + " in stage " +
          s.peak_stage + "; live at the peak: " + (s.live_at_peak || []).join(", ")));
      var workers = s.worker_processes || {};
      if (s.process) drawProcess(box, Object.keys(workers).length ? "scheduler" : "process", s.process);
      Object.keys(workers).sort().forEach(function (w) { drawProcess(box, w, workers[w]); });
    }
  }

  // summary.json memory.process (and memory.worker_processes, a launched
  // run's workers): a process's peak resident memory, part by part, each
  // with its share of that peak.
  function drawProcess(box, name, p) {
    var whole = p.peak_resident_bytes || 1;
    var share = function (n) { return num(100 * Math.min(n, whole) / whole, 1) + "%"; };
    var rows = Object.keys(p.parts).map(function (k) { return [k, bytes(p.parts[k]), share(p.parts[k])]; });
    rows.push(["remainder (named by nothing)", bytes(p.remainder_bytes), share(p.remainder_bytes)]);
    box.appendChild(el("p", {}, name + " memory: allocated (tracked tensors) " + bytes(p.tracked_bytes) +
        ", heap in use " + bytes(p.heap_in_use_bytes) + ", heap held " + bytes(p.heap_held_bytes) +
        ", resident peak " + bytes(p.peak_resident_bytes) + "; named " + share(p.named_bytes)));
    box.appendChild(table(["part", "bytes", "of resident peak"], rows, 1));
  }

  function drawSteps(d) {
    var box = clear("step-table");
    var rows = d.steps.slice().reverse().map(function (r) {
      return [String(r.step), num(r.step_seconds, 2), num(r.mean_reward), num(r.accuracy),
              num(r.effective_sample_rate), num(r.rollout_update_ratio, 2),
              num(r.verifier_wait_seconds, 3), num((r.stage_seconds || {}).environment, 3),
              num(r.generated_tokens_per_second, 0), String(r.rollout_concurrency || 0),
              num(r.handoff_seconds, 3), bytes(r.move_bytes || 0) + " / " + num(r.move_seconds || 0, 3),
              bytes(r.peak_bytes || 0), num(r.kl, 4), num(r.teacher_divergence || 0, 4),
              num(r.bubble_fraction, 2), String(r.rollout_actors || 0)];
    });
    box.appendChild(table(["step", "seconds", "reward", "accuracy", "effective", "rollout/update",
                           "verifier wait s", "environment wait s", "gen tok/s", "decode batch", "handoff s", "moves (bytes / s)", "peak", "kl", "teacher divergence", "bubble", "actors"],
                          rows, 0));
  }

  function drawWorkers(workers) {
    if (!workers || !workers.length) return;
    document.getElementById("workers-section").hidden = false;
    var box = clear("workers");
    box.appendChild(table(["worker", "role", "address", "state"], workers.map(function (w) {
      return [w.worker, w.role, w.address || "", w.up ? "up" : "dead"];
    }), 3));
  }

  function drawEvals(d) {
    if (!d.evals.length) return;
    document.getElementById("evals-section").hidden = false;
    clear("evals").appendChild(table(["label", "step", "prompts", "accuracy"], d.evals.map(function (e) {
      // An incomplete evaluation has no accuracy.
      var accuracy = e.complete === false ? "INCOMPLETE (" + e.unscored + " not scored)" : num(e.accuracy);
      return [e.label, String(e.step), String(e.prompts), accuracy];
    }), 1));
  }

  // compare.json: any JSON; objects become rows of key, baseline, candidate.
  function drawComparison(c) {
    if (!c) return;
    document.getElementById("comparison-section").hidden = false;
    var rows = [];
    (function flatten(prefix, v) {
      if (v && typeof v === "object" && !Array.isArray(v) && !("baseline" in v && "candidate" in v)) {
        Object.keys(v).forEach(function (k) { flatten(prefix ? prefix + "." + k : k, v[k]); });
      } else if (v && typeof v === "object" && "baseline" in v) {
        rows.push([prefix, JSON.stringify(v.baseline), JSON.stringify(v.candidate)]);
      } else {
        rows.push([prefix, JSON.stringify(v), ""]);
      }
    })("", c);
    clear("comparison").appendChild(table(["", "baseline", "candidate"], rows, 1));
  }

  function draw(d) {
    last = d;
    drawHeader(d);
    drawRatios(d);
    drawTimeline(d);
    drawMemory(d);
    drawPeaks(d);
    drawSteps(d);
    drawEvals(d);
    drawComparison(d.comparison);
  }

  document.getElementById("timeline-from").addEventListener("input", function (e) {
    // At the newest steps, follow them again as they come.
    timelineFrom = e.target.value === e.target.max ? null : Number(e.target.value);
    if (last) drawTimeline(last);
  });

  function getJson(url) {
    return fetch(url, {cache: "no-store"}).then(function (r) {
      if (!r.ok) throw new Error(url + ": HTTP " + r.status);
      return r.json();
    });
  }
  function poll() {
    Promise.all([getJson("api/view"), getJson("api/job"), getJson("api/workers")]).then(function (a) {
      a[0].job = a[1];
      draw(a[0]);
      drawWorkers(a[2]);
    }).catch(function (e) {
      document.getElementById("mode").textContent = "not reachable: " + e.message;
    }).then(function () { setTimeout(poll, 2000); });
  }

  if (window.TRELLIS_DATA) {
    window.TRELLIS_DATA.static = true;
    draw(window.TRELLIS_DATA);
  } else {
    poll();
  }
})();
