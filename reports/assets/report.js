/* tsopt report: draws the embedded study document as hand-written SVG.
 * No library, nothing fetched: the page must work offline from one file.
 * Python computes every figure (reports/data.py); this script only draws. */
(function () {
  "use strict";
  var SVGNS = "http://www.w3.org/2000/svg";
  var DOC = JSON.parse(document.getElementById("tsopt-data").textContent);
  var KIND_COLORS = {acquire: "#e8913a", commit: "#3aa35b", wait: "#3c7fd6",
                     release: "#8a55c9", work: "#9aa3b2"};
  var STAGE_COLORS = {dataflow: "#9aa3b2", ts: "#d64545", tsopt: "#d98a1c",
                      build: "#8a55c9", measure: "#3c7fd6"};

  // -- small DOM helpers ---------------------------------------------------------------
  function h(tag, attrs, children) {
    var node = document.createElement(tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }
  function s(tag, attrs, children) {
    var node = document.createElementNS(SVGNS, tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }
  function setAttrs(node, attrs) {
    if (!attrs) return;
    Object.keys(attrs).forEach(function (k) {
      var v = attrs[k];
      if (v === null || v === undefined || v === false) return;
      if (k === "text") node.textContent = v;
      else if (k === "html") node.innerHTML = v;
      else if (k === "onclick") node.addEventListener("click", v);
      else if (k === "onchange") node.addEventListener("change", v);
      else node.setAttribute(k, v);
    });
  }
  function append(node, children) {
    if (children === undefined || children === null) return;
    if (!Array.isArray(children)) children = [children];
    children.forEach(function (c) {
      if (c === null || c === undefined || c === false) return;
      node.appendChild(typeof c === "string" || typeof c === "number"
        ? document.createTextNode(String(c)) : c);
    });
  }

  // -- number formatting ---------------------------------------------------------------
  function fmt(x, digits) {
    if (x === null || x === undefined || !isFinite(x)) return "\u2013";
    var d = digits === undefined ? 3 : digits;
    var a = Math.abs(x);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return x.toExponential(d - 1);
    return Number(x.toPrecision(d)).toLocaleString("en-US");
  }
  function fmtUs(us) {
    if (us === null || us === undefined) return "\u2013";
    if (us >= 1000) return fmt(us / 1000, 4) + " ms";
    return fmt(us, 4) + " \u00b5s";
  }
  function fmtSeconds(sec) {
    if (sec < 120) return fmt(sec, 3) + " s";
    if (sec < 7200) return fmt(sec / 60, 3) + " min";
    return fmt(sec / 3600, 3) + " h";
  }
  function niceTicks(lo, hi, count) {
    if (!(hi > lo)) { hi = lo + 1; }
    var span = hi - lo, step = Math.pow(10, Math.floor(Math.log10(span / count)));
    var err = count / span * step;
    if (err <= 0.15) step *= 10; else if (err <= 0.35) step *= 5; else if (err <= 0.75) step *= 2;
    var ticks = [], start = Math.ceil(lo / step) * step;
    for (var t = start; t <= hi + step * 1e-9; t += step) ticks.push(Number(t.toPrecision(12)));
    return ticks;
  }

  function logTicks(lo, hi) {
    var ticks = [], steps = [[1], [1, 2, 5], [1, 2, 3, 4, 5, 6, 7, 8, 9]];
    for (var i = 0; i < steps.length && ticks.length < 4; i++) {
      ticks = [];
      for (var k = Math.floor(Math.log10(lo)); k <= Math.ceil(Math.log10(hi)); k++) {
        steps[i].forEach(function (m) {
          var t = Number((m * Math.pow(10, k)).toPrecision(6));
          if (t >= lo && t <= hi) ticks.push(t);
        });
      }
    }
    return ticks;
  }

  // -- charts --------------------------------------------------------------------------
  /* Scatter of every timed candidate plus the best-so-far step line (and a baseline). */
  function convergenceChart(points, opts) {
    var W = 520, H = 280, L = 64, R = 26, T = 14, B = 44;
    var xs = points.map(function (p) { return p[0]; });
    var ys = points.map(function (p) { return p[1]; });
    var xmin = Math.min.apply(null, xs.concat([opts.xFloor])), xmax = Math.max.apply(null, xs);
    var ylo = Math.min.apply(null, ys), yhi = Math.max.apply(null, ys);
    if (opts.hline) { ylo = Math.min(ylo, opts.hline.y); yhi = Math.max(yhi, opts.hline.y); }
    if (xmax <= xmin) xmax = xmin + 1;
    // Kernel times spread over decades: a log axis keeps the best-so-far line readable.
    var log = ylo > 0 && yhi / ylo > 3, ticks;
    if (log) {
      ylo /= 1.08; yhi *= 1.08;
      ticks = logTicks(ylo, yhi);
    } else {
      var pad = (yhi - ylo) * 0.06 || Math.abs(yhi) * 0.1 || 1;
      ylo = Math.max(0, ylo - pad); yhi += pad;
      ticks = niceTicks(ylo, yhi, 5);
    }
    var fy = log ? Math.log : function (y) { return y; };
    var sx = function (x) { return L + (x - xmin) / (xmax - xmin) * (W - L - R); };
    var sy = function (y) { return T + (fy(yhi) - fy(y)) / (fy(yhi) - fy(ylo)) * (H - T - B); };
    var svg = s("svg", {viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img",
                        "aria-label": opts.title});
    var grid = s("g", {"class": "grid"}), axis = s("g", {"class": "axis"});
    ticks.forEach(function (t) {
      grid.appendChild(s("line", {x1: L, x2: W - R, y1: sy(t), y2: sy(t)}));
      axis.appendChild(s("text", {x: L - 6, y: sy(t) + 4, "text-anchor": "end",
                                  text: opts.yFormat(t)}));
    });
    niceTicks(xmin, xmax, 6).forEach(function (t) {
      axis.appendChild(s("line", {x1: sx(t), x2: sx(t), y1: H - B, y2: H - B + 4}));
      axis.appendChild(s("text", {x: sx(t), y: H - B + 16, "text-anchor": "middle",
                                  text: opts.xFormat(t)}));
    });
    axis.appendChild(s("path", {d: "M" + L + " " + T + "V" + (H - B) + "H" + (W - R), fill: "none"}));
    axis.appendChild(s("text", {x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle",
                                "class": "muted", text: opts.xLabel}));
    axis.appendChild(s("text", {x: 12, y: (T + H - B) / 2, "text-anchor": "middle", "class": "muted",
                                transform: "rotate(-90 12 " + (T + H - B) / 2 + ")",
                                text: opts.yLabel + (log ? ", log scale" : "")}));
    svg.appendChild(grid);
    svg.appendChild(axis);
    // Every timed candidate as one path of dots: one DOM node even for 10,000 points.
    var dots = points.map(function (p) {
      return "M" + sx(p[0]).toFixed(1) + " " + sy(p[1]).toFixed(1) + "h0";
    }).join("");
    svg.appendChild(s("path", {d: dots, stroke: "#9db7e8", "stroke-width": 4,
                               "stroke-linecap": "round", fill: "none", "class": "points"}));
    var best = Infinity, step = "";
    points.forEach(function (p, i) {
      if (p[1] < best) {
        if (i === 0) step = "M" + sx(p[0]).toFixed(1) + " " + sy(p[1]).toFixed(1);
        else step += "H" + sx(p[0]).toFixed(1) + "V" + sy(p[1]).toFixed(1);
        best = p[1];
      }
    });
    step += "H" + sx(xmax).toFixed(1);
    svg.appendChild(s("path", {d: step, stroke: "#2f6fdf", "stroke-width": 2, fill: "none",
                               "class": "best-so-far"}));
    if (opts.hline) {
      var y = sy(opts.hline.y);
      svg.appendChild(s("line", {x1: L, x2: W - R, y1: y, y2: y, stroke: "#d64545",
                                 "stroke-dasharray": "5 4", "stroke-width": 1.5}));
      svg.appendChild(s("text", {x: W - R - 4, y: y - 5, "text-anchor": "end",
                                 fill: "#d64545", text: opts.hline.label}));
    }
    return svg;
  }

  /* Horizontal bars: items [{label, value, text, color, title}]. */
  function barChart(items, opts) {
    var labelW = opts.labelWidth || 150, W = opts.width || 520, row = 24, T = 6;
    var H = T + items.length * row + 8;
    var max = opts.max || Math.max.apply(null, items.map(function (i) { return i.value; })) || 1;
    var barW = W - labelW - 90;
    var svg = s("svg", {viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img",
                        "aria-label": opts.title});
    items.forEach(function (item, i) {
      var y = T + i * row;
      var g = s("g", {"class": "bar"}, s("title", {text: item.title || item.label}));
      g.appendChild(s("text", {x: labelW - 8, y: y + 16, "text-anchor": "end",
                               text: clip(item.label, Math.floor(labelW / 6.4))}));
      g.appendChild(s("rect", {x: labelW, y: y + 3, height: row - 8, rx: 3,
                               width: Math.max(item.value > 0 ? 2 : 0, item.value / max * barW),
                               fill: item.color || "#2f6fdf"}));
      g.appendChild(s("text", {x: labelW + Math.max(0, item.value / max * barW) + 6, y: y + 16,
                               text: item.text}));
      svg.appendChild(g);
    });
    svg.appendChild(s("line", {x1: labelW, x2: labelW, y1: T, y2: H - 6, stroke: "#8b93a3"}));
    return svg;
  }
  function clip(text, n) { return text.length > n ? text.slice(0, n - 1) + "\u2026" : text; }

  /* Per-task lanes: which warps run the task; each op boxed in its section (head | loop | tail). */
  function timelineChart(tasks, title) {
    var sections = ["head", "loop", "tail"], BOX = 96, GAP = 6, LABEL = 170, LANE = 40, TOP = 30;
    var width = {};
    sections.forEach(function (sec) {
      width[sec] = Math.max.apply(null, [sec === "loop" ? 1 : 0].concat(tasks.map(function (t) {
        return t.ops.filter(function (o) { return o.section === sec; }).length;
      })));
    });
    var x0 = {}, x = LABEL;
    sections.forEach(function (sec) {
      x0[sec] = x;
      x += width[sec] ? width[sec] * (BOX + GAP) + 18 : 36;
    });
    var W = x + 4, H = TOP + tasks.length * LANE + 6;
    var svg = s("svg", {viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img",
                        "aria-label": title, "class": "timeline"});
    sections.forEach(function (sec) {
      var w = width[sec] ? width[sec] * (BOX + GAP) + 6 : 24;
      if (sec === "loop") {
        svg.appendChild(s("rect", {x: x0[sec] - 3, y: TOP - 6, width: w, height: H - TOP,
                                   rx: 8, fill: "#eef3fd", stroke: "#b9cdf3",
                                   "stroke-dasharray": "4 3"}));
      }
      svg.appendChild(s("text", {x: x0[sec] + w / 2 - 3, y: 16, "text-anchor": "middle",
                                 "class": "muted",
                                 text: sec === "loop" ? "loop \u21bb (every iteration)" : sec}));
    });
    tasks.forEach(function (task, i) {
      var y = TOP + i * LANE;
      svg.appendChild(s("line", {x1: 4, x2: W - 4, y1: y + LANE - 4, y2: y + LANE - 4,
                                 stroke: "#eceff4"}));
      svg.appendChild(s("text", {x: 6, y: y + 14, "font-weight": 600,
                                 text: clip(task.task, 24)}));
      svg.appendChild(s("text", {x: 6, y: y + 28, "class": "muted", text: task.warps}));
      var slot = {head: 0, loop: 0, tail: 0};
      task.ops.forEach(function (op) {
        var bx = x0[op.section] + slot[op.section]++ * (BOX + GAP);
        var g = s("g", {"class": "op op-" + op.kind},
                  s("title", {text: op.name + " \u2014 " + op.kind + " in " + op.section}));
        g.appendChild(s("rect", {x: bx, y: y + 4, width: BOX, height: LANE - 14, rx: 4,
                                 fill: KIND_COLORS[op.kind] || KIND_COLORS.work}));
        g.appendChild(s("text", {x: bx + BOX / 2, y: y + 4 + (LANE - 14) / 2 + 4,
                                 "text-anchor": "middle", fill: "#fff", style: "fill:#fff",
                                 text: clip(op.name, 14)}));
        svg.appendChild(g);
      });
    });
    return svg;
  }

  function legend(map) {
    return h("div", {"class": "legend"}, Object.keys(map).map(function (k) {
      return h("span", {style: "--c:" + map[k], text: k});
    }));
  }

  function figure(kind, svg, caption) {
    return h("figure", {"class": "plot", "data-plot": kind}, [svg,
      caption ? h("figcaption", {text: caption}) : null]);
  }

  // -- sortable table ------------------------------------------------------------------
  function sortableTable(columns, rows, onSelect) {
    var tbody = h("tbody");
    var head = h("tr");
    var state = {key: null, dir: 1};
    columns.forEach(function (col, ci) {
      var th = h("th", {"data-key": col.key, "class": col.text ? "text" : null, title: col.title,
                        text: col.label, scope: "col"});
      th.addEventListener("click", function () {
        state.dir = state.key === ci ? -state.dir : (col.desc ? -1 : 1);
        state.key = ci;
        Array.prototype.forEach.call(head.children, function (other) {
          other.removeAttribute("aria-sort");
        });
        th.setAttribute("aria-sort", state.dir > 0 ? "ascending" : "descending");
        fill();
      });
      head.appendChild(th);
    });
    function compare(a, b) {
      var ci = state.key, va = a.cells[ci], vb = b.cells[ci];
      var na = va === null || va === undefined, nb = vb === null || vb === undefined;
      if (na || nb) return na === nb ? a.order - b.order : (na ? 1 : -1);  // blanks last
      // Code-point order for text: hashes and gene labels are identifiers, not prose.
      var c = typeof va === "number" && typeof vb === "number" ? va - vb
        : (String(va) < String(vb) ? -1 : (String(va) > String(vb) ? 1 : 0));
      return c * state.dir || a.order - b.order;
    }
    function fill() {
      var sorted = rows.slice();
      if (state.key !== null) sorted.sort(compare);
      tbody.textContent = "";
      sorted.forEach(function (row) {
        var tr = h("tr", {"data-hash": row.hash});
        row.cells.forEach(function (v, ci) {
          var col = columns[ci];
          tr.appendChild(h("td", {"class": col.text ? "text" : null,
                                  text: col.format ? col.format(v) : (v === null ? "\u2013" : v)}));
        });
        tr.addEventListener("click", function () {
          Array.prototype.forEach.call(tbody.children, function (r) { r.classList.remove("selected"); });
          tr.classList.add("selected");
          onSelect(row);
        });
        tbody.appendChild(tr);
      });
    }
    fill();
    return h("table", {"class": "sortable candidates"}, [h("thead", null, head), tbody]);
  }

  // -- sections ------------------------------------------------------------------------
  function card(title, body, id) {
    return h("section", {"class": "card", "data-section": id}, [h("h3", {text: title})].concat(body));
  }
  function nothing(text) { return h("p", {"class": "nothing", text: text}); }

  function factsSection(st) {
    var facts = [["space", st.space], ["problem", st.problem], ["arch", st.arch],
                 ["sampler", st.sampler], ["cost model's prior", st.cost_prior],
                 ["library", st.library], ["launch mode", st.launch_text],
                 ["measured on", st.measured_on_text],
                 ["status", st.status], ["created", st.created_at],
                 ["updated", st.updated_at]];
    return h("dl", {"class": "facts"}, facts.map(function (f) {
      return h("div", null, [h("dt", {text: f[0]}), h("dd", {text: f[1]})]);
    }));
  }

  function nothingTimedText(st) {
    var f = {};
    st.funnel.forEach(function (x) { f[x.key] = x.count; });
    return "Nothing was timed yet: " + f.proposed + " candidates proposed, " + f.tsopt_checked +
      " valid, " + f.built + " built, none measured correct on a GPU. Measure the bundle on a " +
      "GPU machine (tsopt measure BUNDLE), then record it (tsopt ingest BUNDLE).";
  }

  function bestSection(st) {
    var b = st.best;
    if (!b) return card("Best vs baseline", [nothing(nothingTimedText(st))], "best");
    var ratioClass = b.ratio === null ? "" : (b.ratio >= 1 ? "good" : "bad");
    var kpis = h("div", {"class": "kpis"}, [
      kpi("best median", fmtUs(b.median_us), ""),
      kpi(b.baseline_name + " median", fmtUs(b.baseline_median_us), ""),
      kpi("speed vs " + b.baseline_name, b.ratio === null ? "\u2013" : fmt(b.ratio, 3) + "\u00d7" +
          (b.interval ? " [" + fmt(b.interval[0], 3) + "\u2013" + fmt(b.interval[1], 3) + "]" : ""),
          ratioClass),
      kpi("best rate", b.rate === null ? "\u2013" : fmt(b.rate, 4) + " " + b.rate_unit, ""),
      kpi(b.baseline_name + " rate",
          b.baseline_rate === null ? "\u2013" : fmt(b.baseline_rate, 4) + " " + b.rate_unit, ""),
    ]);
    var items = [{label: "best candidate", value: b.median_us, text: fmtUs(b.median_us),
                  color: "#2f6fdf"}];
    if (b.baseline_median_us !== null) {
      items.push({label: b.baseline_name, value: b.baseline_median_us,
                  text: fmtUs(b.baseline_median_us), color: "#d64545"});
    }
    var caption = "Median time (lower is better), " + b.runs + " runs, run " + b.run_id +
      (b.device ? " on " + b.device : "") + "; candidate " + b.hash.slice(0, 12) +
      "; relative error " + fmt(b.rel_err, 2) + ".";
    return card("Best vs baseline", [kpis, figure("best", barChart(items, {
      title: "best vs baseline", labelWidth: 130}), caption)], "best");
  }
  function kpi(k, v, cls) {
    return h("div", {"class": "kpi " + cls}, [h("div", {"class": "v", text: v}),
                                               h("div", {"class": "k", text: k})]);
  }

  function convergenceSection(st) {
    var c = st.convergence;
    if (!c.by_trial.length) return card("Convergence", [nothing("Nothing was timed yet, so there is no convergence to draw.")], "convergence");
    var hline = st.best && st.best.baseline_median_us !== null
      ? {y: st.best.baseline_median_us, label: st.best.baseline_name} : null;
    var byTrial = convergenceChart(c.by_trial, {
      title: "best so far against candidates", xLabel: "candidate (proposal order)",
      yLabel: "median time (\u00b5s)", xFloor: 1, hline: hline,
      xFormat: function (t) { return fmt(t, 4); }, yFormat: function (t) { return fmt(t, 3); }});
    var byTime = convergenceChart(c.by_time, {
      title: "best so far against wall time", xLabel: "wall time since the study began",
      yLabel: "median time (\u00b5s)", xFloor: 0, hline: hline,
      xFormat: fmtSeconds, yFormat: function (t) { return fmt(t, 3); }});
    return card("Convergence", [h("div", {"class": "plots"}, [
      figure("convergence-trials", byTrial, c.by_trial.length + " timed of " + c.proposed +
             " proposed; dots: each timed candidate, line: best so far."),
      figure("convergence-time", byTime, "Each timed candidate at the time it was proposed."),
    ])], "convergence");
  }

  function funnelSection(st) {
    var first = st.funnel.length ? st.funnel[0].count : 0;
    var items = st.funnel.map(function (x) {
      var pct = first ? " (" + fmt(100 * x.count / first, 3) + "%)" : "";
      return {label: x.label, value: x.count, text: x.count.toLocaleString("en-US") + pct,
              color: "#2f6fdf"};
    });
    var parts = [figure("funnel", barChart(items, {title: "funnel", labelWidth: 130}),
      "Candidates that passed each gate: raw \u2192 dataflow-legal \u2192 TS-valid \u2192 " +
      "tsopt-checked \u2192 built \u2192 correct \u2192 timed.")];
    var b = st.bounded;
    if (b && b.count) {
      parts.push(h("p", {"class": "note bounded", text: b.count.toLocaleString("en-US") + " of the " +
        b.valid.toLocaleString("en-US") + " valid candidates passed TS's exhaustive interleaving " +
        "search only up to its bound of " + b.bound.toLocaleString("en-US") + " explored states " +
        "(no deadlock or race found, but not a complete proof; `tsopt prove --db URL --study " +
        "NAME --top K` runs those searches to the end)."}));
    }
    return card("Funnel", parts, "funnel");
  }

  function rejectionSection(st) {
    var r = st.rejections;
    if (!r.length) return card("Rejections", [h("p", {"class": "note", text: "No candidate was rejected or failed."})], "rejections");
    var items = r.map(function (x) {
      return {label: x.rule, value: x.count, text: x.count.toLocaleString("en-US"),
              color: STAGE_COLORS[x.stage] || "#9aa3b2", title: x.stage + ": " + x.rule};
    });
    var table = h("table", {"class": "rejections"}, [
      h("thead", null, h("tr", null, ["stage", "rule", "candidates", "example message"].map(function (t, i) {
        return h("th", {"class": i === 2 ? null : "text", text: t});
      }))),
      h("tbody", null, r.map(function (x) {
        return h("tr", null, [h("td", {"class": "text", text: x.stage}),
                              h("td", {"class": "text", text: x.rule}),
                              h("td", {text: x.count.toLocaleString("en-US")}),
                              h("td", {"class": "example", text: x.example})]);
      })),
    ]);
    return card("Rejections by rule", [
      figure("rejections", barChart(items, {title: "rejections by rule", labelWidth: 190}),
             "Candidates stopped per rule, coloured by stage."),
      legend(STAGE_COLORS), table], "rejections");
  }

  function importanceSection(st) {
    var imp = st.importance;
    var body = [h("p", {"class": "note", text: "Method: " + imp.method})];
    var rests = "Rests on " + imp.timed + " timed candidate" + (imp.timed === 1 ? "" : "s") + ".";
    if (imp.timed < imp.min_timed) {
      body.push(nothing("Parameter importance needs at least " + imp.min_timed +
                        " timed candidates; this study has " + imp.timed + "."));
    } else if (!imp.genes.length) {
      body.push(nothing("No gene took more than one value among the timed candidates."));
    } else {
      if (!imp.reliable) {
        body.push(h("p", {"class": "caveat", id: "importance-caveat",
          text: "Unreliable: " + rests + " Below " + imp.reliable_timed + " candidates a gene " +
                "with no effect at all shows a large share by chance alone (with v values over " +
                "n candidates, (v\u22121)/(n\u22121) on average: the \u201cchance\u201d beside " +
                "each bar). Time more candidates before reading this."}));
      }
      var items = imp.genes.slice(0, 20).map(function (g) {
        return {label: g.gene, value: g.eta2, color: imp.reliable ? "#3aa35b" : "#b8bec9",
                text: fmt(g.eta2, 2) + "  (best: " + g.best_value + "; chance " +
                      fmt(g.chance, 2) + ")",
                title: g.gene + ": " + g.values + " values"};
      });
      body.push(figure("importance", barChart(items, {title: "parameter importance", max: 1,
        labelWidth: 170}), "Share of log-time variance explained (0\u20131). " + rests +
        (imp.reliable ? "" : " Unreliable (fewer than " + imp.reliable_timed + ").")));
    }
    return card("Parameter importance", body, "importance");
  }

  function scheduleSection(st, index) {
    var holder = h("div", {"class": "timeline-holder"});
    var caption = h("p", {"class": "note"});
    var picker = null;
    function show(i) {
      var sch = st.schedules[i];
      holder.textContent = "";
      holder.appendChild(figure("timeline", timelineChart(sch.tasks, "schedule " + sch.label),
        "Candidate " + sch.hash.slice(0, 12) + " (" + sch.label + "). Each lane is a task on " +
        "its warps; ops in program order, placed in head, loop or tail."));
      caption.textContent = "Source of the warp ranges: " + sch.note + ".";
      if (picker) picker.value = String(i);
    }
    if (!st.schedules.length) {
      return card("Schedule", [nothing("No candidate recorded, so there is no schedule to draw.")], "schedule");
    }
    if (st.schedules.length > 1) {
      picker = h("select", {"aria-label": "candidate", onchange: function () { show(Number(picker.value)); }},
        st.schedules.map(function (sch, i) {
          return h("option", {value: String(i), text: sch.label + " \u2014 " + sch.hash.slice(0, 12)});
        }));
    }
    show(0);
    index[st.name] = {show: show, hashes: st.schedules.map(function (x) { return x.hash; })};
    var title = st.best ? "Schedule of the best candidate (click a table row for another)"
                        : "Schedule (nothing timed yet)";
    return card(title, [picker, holder, legend(KIND_COLORS), caption], "schedule");
  }

  function tableSection(st, index) {
    var t = st.table;
    if (!t.rows.length) return card("Top candidates", [nothing("No candidate was timed correct yet.")], "table");
    var columns = [
      {key: "rank", label: "#", title: "rank by paired ratio to the baseline (median over measurements)"},
      {key: "hash", label: "genome", text: true, format: function (v) { return v.slice(0, 12); }},
      {key: "origin", label: "origin", text: true},
      {key: "trial", label: "trial"},
      {key: "median_us", label: "median \u00b5s", format: function (v) { return fmt(v, 4); }},
      {key: "p10_us", label: "p10 \u00b5s", format: function (v) { return fmt(v, 4); }},
      {key: "p90_us", label: "p90 \u00b5s", format: function (v) { return fmt(v, 4); }},
      {key: "rate", label: "rate", desc: true, format: function (v) { return fmt(v, 4); }},
      {key: "ratio", label: "\u00d7 baseline", desc: true, format: function (v) { return fmt(v, 3); }},
      {key: "interval", label: "95 % interval", text: true, title: "envelope of the paired ratio's 95 % intervals"},
      {key: "measurements", label: "meas.", title: "measurements the standing rests on"},
      {key: "unseparated", label: "vs #1", text: true, title: "\u2248 #1: its interval overlaps rank 1's; the noise cannot separate them"},
      {key: "flags", label: "GPU flags", text: true, title: "thermal or hardware slowdown while measured"},
      {key: "rel_err", label: "rel. err", format: function (v) { return fmt(v, 2); }},
      {key: "registers", label: "regs"},
      {key: "smem_bytes", label: "smem B"},
    ].concat(t.genes.map(function (g) { return {key: "gene:" + g, label: g, text: false}; }));
    var rows = t.rows.map(function (r, i) {
      return {hash: r.hash, order: i, cells: [r.rank, r.hash, r.origin, r.trial, r.median_us,
        r.p10_us, r.p90_us, r.rate, r.ratio, r.interval, r.measurements, r.unseparated, r.flags,
        r.rel_err, r.registers, r.smem_bytes].concat(r.genes)};
    });
    var table = sortableTable(columns, rows, function (row) {
      var entry = index[st.name];
      if (!entry) return;
      var i = entry.hashes.indexOf(row.hash);
      if (i >= 0) entry.show(i);
    });
    var close = t.rows.filter(function (r) { return r.unseparated; }).length;
    return card("Top candidates", [h("p", {"class": "note", text: "The " + t.rows.length +
      " best correct candidates by their paired ratio to the baseline (median over their " +
      "measurements, with the envelope of the 95 % intervals). " + (close ? close +
      " of them cannot be separated from #1 by the noise (\u2248 #1). " : "") +
      "Click a column to sort, a row to draw its schedule below."}),
      h("div", {"class": "table-scroll"}, table)], "table");
  }

  function studySection(st) {
    var index = {};
    var schedule = scheduleSection(st, index);
    var root = h("article", {"class": "study", "data-study": st.name}, [
      h("section", {"class": "card"}, [h("h2", {text: st.name}), factsSection(st)]),
      bestSection(st), convergenceSection(st), funnelSection(st), rejectionSection(st),
      importanceSection(st), tableSection(st, index), schedule,
    ]);
    return root;
  }

  function compareSection(studies) {
    var metric = function (label, get) {
      return h("tr", null, [h("th", {"class": "text", text: label, scope: "row"})].concat(
        studies.map(function (st) { return h("td", {text: get(st)}); })));
    };
    var funnel = function (key) {
      return function (st) {
        var f = st.funnel.filter(function (x) { return x.key === key; })[0];
        return f ? f.count.toLocaleString("en-US") : "\u2013";
      };
    };
    var best = function (get) { return function (st) { return st.best ? get(st.best) : "\u2013"; }; };
    var table = h("table", {"class": "compare"}, [
      h("thead", null, h("tr", null, [h("th")].concat(studies.map(function (st) {
        return h("th", {text: st.name});
      })))),
      h("tbody", null, [
        metric("space", function (st) { return st.space; }),
        metric("problem", function (st) { return st.problem; }),
        metric("arch", function (st) { return st.arch; }),
        metric("sampler", function (st) { return st.sampler; }),
        metric("cost model's prior", function (st) { return st.cost_prior; }),
        metric("library", function (st) { return st.library; }),
        metric("launch mode", function (st) { return st.launch; }),
        metric("proposed", funnel("proposed")),
        metric("valid", funnel("tsopt_checked")),
        metric("timed", funnel("timed")),
        metric("best median", best(function (b) { return fmtUs(b.median_us); })),
        metric("best rate", best(function (b) { return fmt(b.rate, 4) + " " + b.rate_unit; })),
        metric("\u00d7 baseline", best(function (b) { return fmt(b.ratio, 3); })),
      ]),
    ]);
    return h("section", {"class": "card", "data-section": "compare"},
             [h("h2", {text: "Side by side"}), table]);
  }

  document.getElementById("page-meta").textContent =
    "Generated " + DOC.generated_at + " from " + DOC.database + ".";
  var main = document.getElementById("studies");
  if (DOC.studies.length > 1) {
    main.classList.add("side-by-side");
    document.getElementById("compare").appendChild(compareSection(DOC.studies));
  }
  DOC.studies.forEach(function (st) { main.appendChild(studySection(st)); });
  document.body.setAttribute("data-ready", "1");
})();
