# Drawn by `penstock sweep` from summary.csv (medians over repeats); run `gnuplot ttft.gp` in this directory.
set terminal pngcairo size 1000,600 font 'sans,11'
set termoption noenhanced
set output 'ttft.png'
set title 'deep_pp_2gpu_k3 (input 16384, output 1, median of 3): TTFT p50 (solid) and p95 (dashed)'
set xlabel 'concurrency (requests in flight)'
set ylabel 'TTFT (ms)'
set grid
set key outside right top
set yrange [0:*]
set xtics (8, 16)
set xrange [7.36:16.64]
plot 'data/tp2_ep2.dat' using 1:3 with linespoints lw 2 pt 7 dt 1 lc 1 title 'tp2_ep2 p50', \
     'data/tp2_ep2.dat' using 1:4 with linespoints lw 2 pt 5 dt 2 lc 1 title 'tp2_ep2 p95', \
     'data/pp2.dat' using 1:3 with linespoints lw 2 pt 7 dt 1 lc 2 title 'pp2 p50', \
     'data/pp2.dat' using 1:4 with linespoints lw 2 pt 5 dt 2 lc 2 title 'pp2 p95', \
     'data/pp2_eager_bank.dat' using 1:3 with linespoints lw 2 pt 7 dt 1 lc 3 title 'pp2_eager_bank p50', \
     'data/pp2_eager_bank.dat' using 1:4 with linespoints lw 2 pt 5 dt 2 lc 3 title 'pp2_eager_bank p95'
