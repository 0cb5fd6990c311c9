"""The report's stylesheet, inline in the page (no external file, font or image)."""

CSS = """
:root { --ink: #111827; --muted: #6b7280; --line: #e5e7eb; --bg: #f9fafb;
  --critical: #b91c1c; --high: #d97706; --medium: #2563eb; --low: #6b7280; }
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { margin: 0 auto; max-width: 1180px; padding: 24px 28px 48px; color: var(--ink);
  font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif;
  background: #fff; }
code, pre, .loc, .sha { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  font-size: 12.5px; }
code { background: #f3f4f6; padding: 1px 4px; border-radius: 4px; overflow-wrap: anywhere;
  unicode-bidi: isolate; }
h1 { font-size: 22px; margin: 4px 0 10px; }
h2 { font-size: 19px; margin: 0 0 8px; padding-top: 8px; border-top: 2px solid var(--ink); }
h3 { font-size: 16px; margin: 18px 0 6px; }
h4 { font-size: 14px; margin: 16px 0 6px; }
a { color: #1d4ed8; }
.meta { color: var(--muted); font-size: 12.5px; }
.headline { font-size: 19px; line-height: 1.45; margin: 8px 0 16px; padding: 14px 16px;
  background: #fef2f2; border-left: 5px solid var(--critical); border-radius: 4px; }
.headline code { font-size: 16px; background: #fff; }
.kpis { display: grid; grid-template-columns: repeat(auto-fit, minmax(170px, 1fr)); gap: 10px;
  margin: 0 0 14px; }
.kpi { border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; background: var(--bg); }
.kpi-label { color: var(--muted); font-size: 12px; }
.kpi-value { font-size: 21px; font-weight: 650; }
.kpi-note { color: var(--muted); font-size: 12px; }
.cost-notes { font-size: 13px; background: #fffbeb; border: 1px solid #fde68a; border-radius: 6px;
  padding: 8px 12px; }
.cost-notes ul, ul.notes { margin: 4px 0 0 18px; padding: 0; }
.toc { margin: 14px 0 4px; font-size: 13px; }
.section { margin-top: 28px; }
.intro, .caption, .hint, .note { color: var(--muted); }
.caption { font-size: 12.5px; margin: 2px 0 0; }
.caption .files { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 11.5px; }
figure.chart-box { margin: 8px 0 14px; }
.chart { width: 100%; min-height: 200px; }
.table-wrap { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; margin: 6px 0 10px; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 5px 8px; vertical-align: top; text-align: left; }
thead th { background: var(--bg); font-weight: 600; white-space: nowrap; }
td.r, th.r { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.kv th { width: 220px; font-weight: 500; color: var(--muted); }
.sev { display: inline-block; padding: 0 7px; border-radius: 10px; color: #fff; font-size: 11.5px;
  font-weight: 600; text-transform: uppercase; letter-spacing: .03em; vertical-align: 2px; }
.sev-critical.sev, .finding.sev-critical .sev { background: var(--critical); }
.sev-high.sev { background: var(--high); }
.sev-medium.sev { background: var(--medium); }
.sev-low.sev { background: var(--low); }
.finding { border: 1px solid var(--line); border-left: 5px solid var(--low); border-radius: 6px;
  padding: 4px 18px 12px; margin: 16px 0 22px; }
.finding.sev-critical { border-left-color: var(--critical); }
.finding.sev-high { border-left-color: var(--high); }
.finding.sev-medium { border-left-color: var(--medium); }
.finding h3 { font-size: 16.5px; }
.finding .label { font-weight: 700; }
.summary { margin: 4px 0 8px; }
.parties { font-size: 13px; margin: 4px 0 8px; }
.parties .k { color: var(--muted); display: inline-block; min-width: 80px; }
dl.figures { display: grid; grid-template-columns: repeat(auto-fit, minmax(150px, 1fr)); gap: 8px;
  margin: 8px 0; }
dl.figures div { background: var(--bg); border-radius: 5px; padding: 6px 10px; }
dl.figures dt { color: var(--muted); font-size: 12px; }
dl.figures dd { margin: 0; font-weight: 650; font-size: 15px; overflow-wrap: anywhere; }
dl.figures dd.sub { font-weight: 400; font-size: 11.5px; color: var(--muted); }
.overlap { font-size: 13px; color: #92400e; }
.signals { font-size: 13.5px; margin: 4px 0 8px; padding: 6px 12px; background: #f5f3ff;
  border-radius: 5px; }
.signals ul { margin: 2px 0 0 18px; padding: 0; }
.signals li { margin: 2px 0; }
.pieces { font-size: 13px; color: #4b5563; margin: 4px 0; }
ol.evidence { padding-left: 22px; }
ol.evidence li { margin-bottom: 8px; }
.loc { font-weight: 600; }
.why { color: #92400e; }
pre.line { margin: 3px 0 0; padding: 6px 8px; background: #0f172a; color: #e2e8f0; border-radius: 4px;
  white-space: pre-wrap; overflow-wrap: anywhere; word-break: break-all; max-height: 220px;
  overflow: auto; unicode-bidi: plaintext; }
.cut, .missing { font-size: 12px; color: var(--muted); }
.missing { color: var(--critical); }
.recommendation { background: #ecfdf5; border: 1px solid #a7f3d0; border-radius: 5px; padding: 8px 12px; }
details.det summary { cursor: pointer; color: var(--muted); font-size: 13px; }
.fid { color: var(--muted); font-size: 12px; margin: 8px 0 0; }
svg.picture { max-width: 100%; height: auto; display: block; margin: 4px 0 10px; }
svg.picture text { font: 12px system-ui, sans-serif; fill: #1f2937; }
svg.picture text.lane { font-weight: 600; }
svg.picture text.step, svg.picture text.edge { font-size: 11px; fill: #4b5563; }
svg.picture text.more { fill: var(--muted); }
ul.params { margin: 0; padding-left: 16px; }
code.name { white-space: nowrap; overflow-wrap: normal; }
.none { color: var(--muted); font-style: italic; }
.sha { word-break: break-all; }
.footer { margin-top: 36px; padding-top: 10px; border-top: 1px solid var(--line); color: var(--muted);
  font-size: 12px; }
@media print { .toc { display: none; } .finding { break-inside: avoid-page; } }
"""
