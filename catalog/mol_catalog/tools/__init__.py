"""tools: functions proposed from sandbox sessions, approved by a person, offered to routers."""
