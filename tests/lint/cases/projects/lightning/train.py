import lightning as L
from model import Net

trainer = L.Trainer(precision="16-mixed", max_epochs=1)
trainer.fit(Net())
