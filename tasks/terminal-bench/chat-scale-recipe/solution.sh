#!/bin/bash
set -euo pipefail
cat > /app/recipe_6.txt <<'EOF'
Pancakes (serves 6)
300 g flour
3 eggs
450 ml milk
1.5 tbsp sugar
0.75 tsp salt
45 g butter
EOF
