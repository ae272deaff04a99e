#!/bin/bash
set -euo pipefail
cat > /app/schedule_es.txt <<'EOF'
Lunes: reunión diaria del equipo
Martes: gimnasio
Miércoles: clase de piano
Jueves: reunión diaria del equipo
Viernes: noche de pizza
Sábado: senderismo
Domingo: descanso
EOF
