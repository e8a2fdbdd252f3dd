"""The dashboard's template, style and script (kept as Python strings: the package ships no data files)."""

from __future__ import annotations

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d2330;background:#fafbfc}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
.meta{color:#5b6475} table{border-collapse:collapse;width:100%;background:#fff}
th,td{border-bottom:1px solid #e4e7ec;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f1f3f6;position:sticky;top:0} td.num{text-align:right;font-variant-numeric:tabular-nums}
.s-passed{color:#1a7f37} .s-failed,.s-error{color:#b42318} .s-crashed,.s-timeout,.s-oom{color:#8a3ffc;font-weight:600}
.regression{color:#b42318;font-weight:600} .improvement{color:#1a7f37}
.chips span{display:inline-block;border-radius:10px;background:#eef1f5;padding:0 8px;margin:0 4px 0 0;font-size:12px}
.filters{margin:8px 0} .filters label{margin-right:16px}
details pre{white-space:pre-wrap;max-height:240px;overflow:auto;background:#f6f8fa;padding:6px}
.trends{display:flex;gap:24px;flex-wrap:wrap} figure{margin:0}
svg.chart{background:#fff;border:1px solid #e4e7ec;max-width:100%;height:auto}
.history{margin:16px 0 24px} .history table{width:auto} .history svg.chart{width:460px}
details.ops summary{cursor:pointer}
"""

SCRIPT = """
(function(){
  var status=document.getElementById('f-status'), tag=document.getElementById('f-tag');
  function apply(){
    var s=status.value, t=tag.value, rows=document.querySelectorAll('tr.model'), shown=0;
    rows.forEach(function(row){
      var tags=(row.getAttribute('data-tags')||'').split(' ');
      var ok=(!s||row.getAttribute('data-status')===s)&&(!t||tags.indexOf(t)>=0);
      row.hidden=!ok; if(ok){shown++;}
    });
    document.getElementById('f-count').textContent=shown+' shown';
  }
  status.addEventListener('change',apply); tag.addEventListener('change',apply); apply();
})();
"""

TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp }}">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>onnxsight zoo: {{ run_id }}</title>
<style>{{ css|safe }}</style></head>
<body>
<h1>onnxsight zoo dashboard</h1>
<div class="meta">run <code>{{ run_id }}</code>{% if started %}, started {{ started }}{% endif %}
 &middot; {{ headline }}{% if interrupted %} &middot; <strong>interrupted: partial results</strong>{% endif %}</div>
<div class="chips">{% for status, n in tally %}<span class="s-{{ status }}">{{ status }}: {{ n }}</span>{% endfor %}</div>
{% for name, reason in skipped %}<p class="meta">{{ 'Model' if '/' in name else 'Suite' }} <strong>{{ name }}</strong> skipped: {{ reason }}</p>{% endfor %}

<h2>Changes since baseline</h2>
{% if baseline is none %}<p class="meta">No baseline (run with <code>--baseline DIR</code> or <code>--baseline auto</code>).</p>
{% elif not changes %}<p class="meta">No changes since <code>{{ baseline }}</code>.</p>
{% else %}<p class="meta">Baseline <code>{{ baseline }}</code></p>
<table id="changes"><thead><tr><th>model</th><th>change</th><th>detail</th></tr></thead><tbody>
{% for c in changes %}<tr><td>{{ c.model }}</td>
<td class="{{ 'regression' if c.regression else ('improvement' if c.kind == 'newly-passing' else '') }}">{{ c.kind }}</td>
<td>{{ c.detail }}</td></tr>{% endfor %}
</tbody></table>{% endif %}

<h2>Trends</h2>
{% if trends %}<div class="trends">{% for chart in trends %}
<figure><figcaption>{{ chart.title }}</figcaption>{{ chart.svg|safe }}</figure>{% endfor %}</div>
{% else %}<p class="meta">Trends appear once the store holds more than one run.</p>{% endif %}

<h2>Models</h2>
<div class="filters">
<label>status <select id="f-status"><option value="">all</option>{% for s, _ in tally %}<option>{{ s }}</option>{% endfor %}</select></label>
<label>tag <select id="f-tag"><option value="">all</option>{% for t in tags %}<option>{{ t }}</option>{% endfor %}</select></label>
<span id="f-count" class="meta"></span></div>
<table id="models"><thead><tr><th>model</th><th>suite</th><th>status</th><th>stage</th><th>time s</th><th>export s</th>
<th>peak MB</th><th>ONNX KB</th><th>max abs diff</th>{% if generation %}<th title="generation steps that agree with PyTorch before the first divergence">steps agreed</th>{% endif %}<th>ONNX nodes</th><th>root cause</th></tr></thead><tbody>
{% for r in rows %}<tr class="model" data-status="{{ r.status }}" data-tags="{{ r.tags|join(' ') }}">
<td>{% if r.history %}<a href="#{{ r.history }}" title="history over the stored runs">{{ r.name }}</a>{% else %}{{ r.name }}{% endif %}<div class="chips">{% for t in r.tags %}<span>{{ t }}</span>{% endfor %}</div></td>
<td>{{ r.suite }}</td><td class="s-{{ r.status }}">{{ r.status }}</td><td>{{ r.stage }}</td>
<td class="num">{{ r.seconds }}</td><td class="num">{{ r.export }}</td><td class="num">{{ r.peak }}</td>
<td class="num">{{ r.size }}</td><td class="num"{% if r.scale %} title="largest eager output: {{ r.scale }}"{% endif %}>{{ r.diff }}</td>{% if generation %}<td class="num">{{ r.steps }}</td>{% endif %}
<td class="num">{% if r.ops %}<details class="ops"><summary>{{ r.nodes }}</summary>{{ r.ops }}</details>{% endif %}</td>
<td>{{ r.problem }}{% if r.link %}<br><a href="{{ r.link }}">{{ r.where }}</a>{% elif r.where %}<br>{{ r.where }}{% endif %}
{% if r.stderr %}<details><summary>stderr</summary><pre>{{ r.stderr }}</pre></details>{% endif %}</td></tr>
{% endfor %}</tbody></table>

{% if histories %}<h2>Model history</h2>
<p class="meta">Each model over the stored runs, newest first: status, export time, peak memory, and its largest
difference from eager against the absolute tolerance of that output.</p>
{% for h in histories %}<section class="history" id="{{ h.anchor }}"><h3>{{ h.name }}</h3>
{% if h.chart %}<figure>{{ h.chart|safe }}</figure>{% endif %}
<table><thead><tr><th>run</th><th>started</th><th>status</th><th>export s</th><th>peak MB</th><th>max abs diff</th><th>atol</th></tr></thead><tbody>
{% for row in h.rows %}<tr><td>{{ row.run_id }}</td><td>{{ row.date }}</td><td class="s-{{ row.status }}">{{ row.status }}</td>
<td class="num">{{ row.export }}</td><td class="num">{{ row.peak }}</td><td class="num">{{ row.diff }}</td><td class="num">{{ row.atol }}</td></tr>
{% endfor %}</tbody></table></section>
{% endfor %}{% endif %}
<script>{{ script|safe }}</script>
</body></html>
"""
