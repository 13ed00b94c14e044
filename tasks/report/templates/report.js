// On load: counts the figures that loaded and records where each figure and table sits, so a reader (or a
// headless browser test holding a screenshot) can tell the page is complete and find each part in it.
window.addEventListener('load',function(){var imgs=document.querySelectorAll('figure img');var ok=0;
imgs.forEach(function(i){if(i.complete&&i.naturalWidth>0){ok++;}});
function box(e){var r=e.getBoundingClientRect();e.setAttribute('data-box',[Math.round(r.left+scrollX),
Math.round(r.top+scrollY),Math.round(r.width),Math.round(r.height)].join(','));}
document.querySelectorAll('figure img, table').forEach(box);
document.body.setAttribute('data-figures',imgs.length);document.body.setAttribute('data-figures-loaded',ok);
document.body.setAttribute('data-height',document.documentElement.scrollHeight);});
