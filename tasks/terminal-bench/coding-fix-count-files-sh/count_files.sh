#!/bin/bash
n=0
for f in $(ls $1); do
    n=$((n + 1))
done
echo $n
