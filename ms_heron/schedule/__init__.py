"""What rules, postprocs and constraints all read: the annotations one rule leaves for another and
for the constraint model (:mod:`.annotations`), the trace and block analysis (:mod:`.analysis`), and
how an operand's stored layout is matched to what an intrinsic reads (:mod:`.operand_layout`)."""
