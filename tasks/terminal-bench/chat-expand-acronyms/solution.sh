#!/bin/bash
set -euo pipefail
sed -e 's/FYI/For your information,/' -e 's/ASAP/as soon as possible/' -e 's/ETA/estimated time of arrival/' \
    -e 's/EOD/end of day/' -e 's/BTW/By the way/' /app/message.txt > /app/message_expanded.txt
