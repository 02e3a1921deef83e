#include "dashboard.h"

#include <string>

namespace frugal::cluster {

// One self-contained page (no external scripts: a lab's cluster network may
// have no internet). It polls /api/state and redraws: nodes with their slots,
// the queue, each job's program (its command, or `frugal train`), progress
// and throughput, an allocation timeline per
// job (every generation is a bar, so resizes show as steps) and each job's
// loss and test-accuracy curves.
namespace {

const char* Page() {
  return R"html(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Frugal cluster</title>
<style>
body{font-family:system-ui,sans-serif;margin:1em 2em;color:#222}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.4em}
table{border-collapse:collapse}td,th{border-bottom:1px solid #ddd;padding:3px 10px;text-align:left;font-size:.9em}
.slot{display:inline-block;width:22px;height:22px;margin:1px;border:1px solid #999;text-align:center;font-size:.7em;line-height:22px}
.down{color:#b00}.bar{height:10px;background:#4a7;display:inline-block}
svg{border:1px solid #ddd;background:#fafafa}
#err{color:#b00}
</style></head><body>
<h1>Frugal cluster <span id="policy"></span></h1><div id="err"></div>
<h2>Nodes</h2><div id="nodes"></div>
<h2>Jobs (queue order)</h2><table id="jobs"></table>
<h2>Allocations over time</h2><svg id="timeline" width="900" height="60"></svg>
<h2>Loss and test accuracy</h2><div id="curves"></div>
<h2>Events</h2><table id="events"></table>
<script>)html";
}

const char* Script() {
  return R"js(
const colors=['#4a7','#47a','#a74','#a47','#7a4','#74a','#aa4','#4aa','#888','#c55'];
const color=id=>colors[id%colors.length];
const esc=s=>String(s).replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]));
function drawNodes(s){
  let h='';
  for(const n of s.nodes){
    const owner=[];for(const a of n.allocations)for(let i=0;i<a.slots;i++)owner.push(a.job_id);
    let slots='';for(let i=0;i<n.slots;i++){const o=owner[i];
      slots+=`<span class="slot" style="background:${o?color(o):'#fff'}" title="${o?'job '+o:'free'}">${o||''}</span>`;}
    h+=`<div class="node" data-node="${n.id}"><b>${esc(n.name)}</b> ${n.up?'up':'<span class="down">down</span>'} ${slots}</div>`;
  }
  document.getElementById('nodes').innerHTML=h||'no agents yet';
}
// A command job's program (Note [Command jobs]), else the built-in trainer.
const program=j=>j.command&&j.command.length?j.command.join(' '):'frugal train';
function drawJobs(s){
  const jobs=[...s.jobs].sort((a,b)=>(a.queue_position<0)-(b.queue_position<0)||a.queue_position-b.queue_position||a.id-b.id);
  let h='<tr><th>queue</th><th>id</th><th>name</th><th>program</th><th>state</th><th>workers</th><th>step</th><th>progress</th><th>samples/s by workers</th><th>restarts</th><th>message</th></tr>';
  for(const j of jobs){
    const frac=j.max_steps>0?Math.min(1,j.step/j.max_steps):0;
    const rates=Object.entries(j.samples_per_s_by_workers).map(([n,r])=>`${n}: ${r.toFixed(0)}`).join(', ');
    h+=`<tr class="job" data-job="${j.id}"><td>${j.queue_position>=0?j.queue_position:''}</td><td style="color:${color(j.id)}">${j.id}</td><td>${esc(j.name)}</td><td class="program">${esc(program(j))}</td><td>${j.state}</td><td>${j.workers} (${j.min_workers}-${j.max_workers})</td><td>${j.step}${j.max_steps?'/'+j.max_steps:''}</td><td><span class="bar" style="width:${(frac*80).toFixed(0)}px"></span> ${(frac*100).toFixed(0)}%</td><td>${rates}</td><td>${j.restarts}</td><td>${esc(j.message)}</td></tr>`;
  }
  document.getElementById('jobs').innerHTML=h;
}
function drawTimeline(s){
  const svg=document.getElementById('timeline');const a=s.allocations;const ids=[...new Set(s.jobs.map(j=>j.id))];
  if(!a.length){svg.innerHTML='';return;}
  const t0=Math.min(...a.map(x=>x.start)),t1=Math.max(s.now,...a.map(x=>x.end));
  const W=800,row=22,maxSlots=Math.max(1,...a.map(x=>x.slots));
  svg.setAttribute('height',ids.length*row+30);
  let h='';ids.forEach((id,k)=>{h+=`<text x="2" y="${k*row+15}" font-size="11">job ${id}</text>`;});
  for(const x of a){const k=ids.indexOf(x.job_id);const end=x.end<0?s.now:x.end;
    const px=90+(x.start-t0)/(t1-t0||1)*W,w=Math.max(1,(end-x.start)/(t1-t0||1)*W),hh=(row-4)*x.slots/maxSlots;
    h+=`<rect class="alloc" x="${px}" y="${k*row+row-2-hh}" width="${w}" height="${hh}" fill="${color(x.job_id)}"><title>job ${x.job_id} gen ${x.generation}: ${x.slots} slots on node ${x.node_id}</title></rect>`;}
  h+=`<text x="90" y="${ids.length*row+20}" font-size="10">0 s</text><text x="${90+W-40}" y="${ids.length*row+20}" font-size="10">${(t1-t0).toFixed(0)} s</text>`;
  svg.innerHTML=h;
}
function curve(points,W,H,lo,hi,col){
  if(points.length<1)return '';const x0=Math.min(...points.map(p=>p[0])),x1=Math.max(...points.map(p=>p[0]));
  return `<polyline fill="none" stroke="${col}" stroke-width="1.5" points="${points.map(p=>
    `${(30+(p[0]-x0)/((x1-x0)||1)*(W-40)).toFixed(1)},${(H-15-(p[1]-lo)/((hi-lo)||1)*(H-25)).toFixed(1)}`).join(' ')}"/>`;
}
function drawCurves(s){
  let h='';
  for(const j of s.jobs){const pts=s.samples[j.id]||[];
    const loss=pts.filter(p=>p[1]>=0).map(p=>[p[0],p[1]]),acc=pts.filter(p=>p[2]>=0).map(p=>[p[0],p[2]]);
    const hi=Math.max(0.1,...loss.map(p=>p[1]));
    h+=`<div class="curve" data-job="${j.id}" style="display:inline-block;margin:4px"><div>job ${j.id} ${esc(j.name)}: loss (line) and accuracy (dashed); last loss ${loss.length?loss[loss.length-1][1].toFixed(3):'-'}, accuracy ${acc.length?(acc[acc.length-1][1]*100).toFixed(1)+'%':'-'}</div>
      <svg width="300" height="140">${curve(loss,300,140,0,hi,color(j.id))}${curve(acc,300,140,0,1,'#333').replace('stroke-width','stroke-dasharray="4 3" stroke-width')}</svg></div>`;}
  document.getElementById('curves').innerHTML=h;
}
function drawEvents(s){
  document.getElementById('events').innerHTML=[...s.events].reverse().slice(0,20).map(e=>
    `<tr><td>${new Date(e.time*1000).toLocaleTimeString()}</td><td>${e.kind}</td><td>${e.job_id||''}</td><td>${esc(e.message)}</td></tr>`).join('');
}
async function refresh(){
  try{const r=await fetch('/api/state');const s=await r.json();
    document.getElementById('policy').textContent='- policy '+s.policy+', '+s.rounds+' rounds';
    drawNodes(s);drawJobs(s);drawTimeline(s);drawCurves(s);drawEvents(s);document.getElementById('err').textContent='';
    document.body.dataset.loaded='1';
  }catch(e){document.getElementById('err').textContent='server unreachable: '+e;}
}
refresh();setInterval(refresh,2000);
</script></body></html>)js";
}

}  // namespace

std::string DashboardHtml() { return std::string(Page()) + Script(); }

}  // namespace frugal::cluster
