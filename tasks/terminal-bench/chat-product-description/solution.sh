#!/bin/bash
set -euo pipefail
cat > /app/description.txt <<'EOF'
Meet the AeroBuds Pro, wireless earbuds built for people who never stop moving. For just $49.99 you
get crisp, balanced sound and up to 20 hours of battery life, so a full day of calls, playlists and
podcasts is no problem. An IPX5 water-resistance rating shrugs off sweat and sudden rain, and a
secure, lightweight fit keeps them in place on every run. Choose the colour that suits you: classic
black, clean white or bold teal.
EOF
