# Drawn by `penstock sweep` from summary.csv (medians over repeats); run `gnuplot input_tps.gp` in this directory.
set terminal pngcairo size 1000,600 font 'sans,11'
set termoption noenhanced
set output 'input_tps.png'
set title 'deep_pp_2gpu_glm (input 16384, output 1, median of 3): input tokens/s'
set xlabel 'concurrency (requests in flight)'
set ylabel 'input tokens/s'
set grid
set key outside right top
set yrange [0:*]
set xtics (8, 16)
set xrange [7.36:16.64]
plot 'data/tp2_ep2.dat' using 1:2 with linespoints lw 2 pt 7 lc 1 title 'tp2_ep2', \
     'data/pp2.dat' using 1:2 with linespoints lw 2 pt 7 lc 2 title 'pp2'
