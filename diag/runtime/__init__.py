"""What runs inside the user's training process: the step decorator and spans
(``instrument``), collective recording (``collectives``), the event-log writer
(``eventlog``), Prometheus metrics (``metrics``) and Flight Recorder dumps on signal
(``flight_recorder``). Imports torch; imports nothing of the offline tools."""
